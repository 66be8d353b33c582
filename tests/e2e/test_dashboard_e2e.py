"""End to end: two real tiny sweeps on the CPU vLLM build, then the dashboard, compare and figure
commands a user runs on them, and the report opened in headless Chromium."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from PIL import Image
from support.browser import CHROMIUM, _figures, _problems, open_in_chromium

from harness.cli import cli
from harness.cli.sweep import write_run_report
from harness.results import load_run
from harness.run.sweep import SweepRequest, run_sweep


def _scraped_running(run_dir: Path, label: str) -> list[tuple[float, float]]:
    """(seconds since the point's first request, requests running summed over engines) per
    scrape, read straight from the point's samples.csv."""
    point = next(p for p in load_run(run_dir).points if p.label == label)
    # Python's float() on the timestamps, as the report reads them: pandas' parser may differ
    samples = pd.read_csv(
        run_dir / "points" / point.point_id / "samples.csv", converters={"timestamp": float}
    )
    rows = samples[samples["name"] == "vllm:num_requests_running"]
    per_scrape = rows.groupby("timestamp")["value"].sum()
    assert len(per_scrape) > 0, f"{run_dir.name} {label}: no running gauge scraped"
    return [(round(t - point.window[0], 6), v) for t, v in per_scrape.items()]


def _drawn(trace: dict) -> list[tuple[float, float]]:
    return [(round(x, 6), y) for x, y in zip(trace["x"], trace["y"], strict=True)]


def test_report_compare_and_figure_on_real_sweeps(
    server_factory, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("REPRO_DASHBOARDS", str(tmp_path / "dashboards"))
    server = server_factory("cpu-tiny-mtp")
    said: list[str] = []
    runs = []
    for run_id, max_tokens in (("base", 24), ("short", 16)):  # small: 2 shared CPU cores
        run_dir = run_sweep(
            SweepRequest(
                "cpu-tiny-mtp",
                overrides=[
                    "sweep.points=[[1,1],[2,2]]",
                    f"sweep.max_tokens={max_tokens}",
                    "sweep.scrape_interval_s=0.25",  # short points on a fast CPU server
                ],
                url=server.base_url,
                out=tmp_path / "results",
                run_id=run_id,
            ),
            echo=said.append,
        )
        write_run_report(run_dir, said.append)  # what `repro sweep` does after the run
        runs.append(run_dir)
    # `repro sweep` itself leaves a dashboard for its run.
    auto = tmp_path / "dashboards" / "base.html"
    assert f"report: {auto}" in said and auto.is_file()
    # ...and its figures: interactive HTML plus PNG and SVG for both figure definitions.
    figures = runs[0] / "figures"
    assert sorted(p.name for p in figures.iterdir()) == sorted(
        f"{stem}.{fmt}"
        for stem in ("pareto", "pareto-bench-sweep")
        for fmt in ("html", "png", "svg")
    )
    Image.open(figures / "pareto.png").verify()
    assert "c2" in (figures / "pareto.svg").read_text(encoding="utf-8")

    runner = CliRunner()
    out = tmp_path / "pr.html"
    result = runner.invoke(
        cli, ["report", str(runs[1]), "--baseline", str(runs[0]), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    html = out.read_text(encoding="utf-8")
    assert "replayed different workloads" in html  # max_tokens differs, and the page says so
    c2 = next(
        fig
        for key, fig in _figures(html).items()
        if key.startswith("timeseries-") and "c2" in fig["layout"]["title"]["text"]
    )
    acceptance = [t for t in c2["data"] if t["meta"]["metric"] == "acceptance"]
    assert len(acceptance) == 2
    for trace in acceptance:  # the bigram MTP model's drafts are always accepted
        assert trace["y"] and all(v == pytest.approx(2.0, abs=0.05) for v in trace["y"])
    # The running panel draws each run's own scrapes, summed per scrape, at seconds since the
    # point's first request. Compared with samples.csv, never with a level the gauge must reach:
    # on a loaded machine every scrape of this short point read 0 running.
    running = [t for t in c2["data"] if t["meta"]["metric"] == "vllm:num_requests_running"]
    assert sorted(_drawn(t) for t in running) == sorted(_scraped_running(r, "c2") for r in runs)

    browser = open_in_chromium(out, tmp_path / "chromium-profile")
    problems = _problems(browser["events"])
    assert problems["errors"] == [] and problems["dialogs"] == []
    assert {u.split(":", 1)[0] for u in problems["requests"]} <= {"file", "data", "blob"}
    assert browser["facts"]["plots"] == html.count('<script type="application/json"')

    result = runner.invoke(cli, ["compare", str(runs[0]), str(runs[1]), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)  # the different-workload warning goes to stderr
    base = {p.label: p for p in load_run(runs[0]).points}
    row = next(r for r in data["rows"] if r["point"] == "c2" and r["metric"] == "duration_s")
    assert row["a"] == pytest.approx(base["c2"].metrics["duration_s"])
    assert row["verdict"] == "info"

    png = tmp_path / "fig.png"
    result = runner.invoke(cli, ["figure", str(runs[0]), str(runs[1]), "--out", str(png)])
    assert result.exit_code == 0, result.output
    assert Image.open(png).size[0] > 1000
    assert Path(CHROMIUM).exists()
