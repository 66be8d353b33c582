"""The think-time study figure (harness/report/think_time.py) on small simulated runs: two arms
x two think times x two concurrencies of a tiny workload, made by the offline simulator. Every
trace's data must equal the run records it was drawn from (point metrics, per-request tables),
and the dashboard shows the figure exactly when the runs vary the think time."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.analysis.point_table import point_table
from harness.report.dashboard import render_report
from harness.report.think_time import study_series, think_time_figure, ttft_parallel
from harness.results import load_run
from harness.sim.run import run_simulation

ARMS = ("hisparse384", "offload512")
PAUSES = (0, 3)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("thinkfig")
    recipe = root / "small.yaml"
    recipe.write_text(
        "number: 8\nnum_turns: 3\nfirst_turn_length: 20000\nsubsequent_turn_length: 400\n"
    )
    out = []
    for arm in ARMS:
        for pause in PAUSES:
            think = f"{{kind: fixed, seconds: {pause}}}" if pause else "{kind: none}"
            out.append(
                run_simulation(
                    arm,
                    dataset=str(recipe),
                    overrides=[
                        "sweep.points=[[2,4],[4,8]]",
                        "sweep.dataset_offset=0",
                        "sweep.scrape_interval_s=2",
                        f"sweep.think_time={think}",
                        "sweep.slo=ttft=20s,tpot=200ms",
                    ],
                    out=root,
                    run_id=f"{arm}-think{pause}",
                )
            )
    return out


def _traces(fig, panel: str) -> dict[tuple[str, float], object]:
    return {(t.meta["arm"], t.meta["think_s"]): t for t in fig.data if t.meta["panel"] == panel}


def test_traces_equal_the_records(runs):
    loaded = [load_run(r) for r in runs]
    fig = think_time_figure(loaded, parallel=4)
    assert fig is not None
    occupancy, ttft, goodput = (_traces(fig, p) for p in ("occupancy", "ttft_by_turn", "goodput"))
    expected_keys = {(arm, float(p)) for arm in ARMS for p in PAUSES}
    assert set(occupancy) == set(ttft) == set(goodput) == expected_keys
    for run in loaded:
        think = float(run.manifest.sweep["think_time"].get("seconds") or 0)
        key = (run.manifest.profile_name, think)
        assert list(occupancy[key].x) == [2, 4]
        assert list(occupancy[key].y) == [p.metrics["occupancy"] for p in run.points]
        assert list(goodput[key].y) == [p.metrics["goodput_rps"] for p in run.points]
        assert all(v is not None and v > 0 for v in goodput[key].y)
        # TTFT by turn at c4: the median of each turn's successful requests, in ms
        c4 = next(p for p in run.points if p.parallel == 4)
        table = point_table(run.root, c4.point_id)
        medians = table[table["success"]].groupby("turn")["ttft_s"].median() * 1000.0
        assert list(ttft[key].x) == [1.0, 2.0, 3.0]
        assert list(ttft[key].y) == pytest.approx(medians.tolist())
    # one colour per think time, one dash per arm
    colours = {k[1]: t.line.color for k, t in occupancy.items()}
    assert len(set(colours.values())) == len(PAUSES)
    assert occupancy[("hisparse384", 3.0)].line.color == occupancy[("offload512", 3.0)].line.color
    assert occupancy[("hisparse384", 3.0)].line.dash != occupancy[("offload512", 3.0)].line.dash
    assert "c4" in fig.layout.annotations[1].text


def test_ttft_panel_falls_back_to_a_concurrency_every_series_ran(runs):
    series = study_series([load_run(r) for r in runs])
    assert ttft_parallel(series, 32) == 4  # no c32 in these runs: the highest common one
    assert ttft_parallel(series, 2) == 2


def test_dashboard_shows_the_figure_only_when_think_time_varies(runs):
    loaded = [load_run(r) for r in runs]
    html = render_report(loaded)
    assert 'id="think-time-study"' in html and 'id="think-time-study-data"' in html
    one_think = [r for r in loaded if r.manifest.run_id.endswith("think3")]
    assert think_time_figure(one_think) is None
    assert 'id="think-time-study"' not in render_report(one_think)
