"""`repro report --slo` and `repro compare --slo`: per arm, each point's attainment and the
highest concurrency meeting the objectives for >= 90% of requests, on two small simulated
runs. The expected answers are computed here from the per-request tables, independently of
harness/report/tables.py."""

from __future__ import annotations

import html as html_lib
import math
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.analysis.point_table import point_table
from harness.analysis.slo import parse_slo
from harness.cli import cli
from harness.results import load_run
from harness.sim.run import run_simulation


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("objectives")
    recipe = root / "small.yaml"
    recipe.write_text(
        "number: 12\nnum_turns: 2\nfirst_turn_length: 30000\nsubsequent_turn_length: 400\n"
    )
    common = ["sweep.points=[[1,2],[8,8]]", "sweep.dataset_offset=0", "sweep.scrape_interval_s=2"]
    return {
        # hisparse384 names objectives in its workload; offload512 names none
        "hisparse384": run_simulation(
            "hisparse384",
            dataset=str(recipe),
            overrides=[*common, "sweep.slo=ttft=60s"],
            out=root,
            run_id="h",
        ),
        "offload512": run_simulation(
            "offload512", dataset=str(recipe), overrides=common, out=root, run_id="o"
        ),
    }


def _attainment(run_dir: Path, ttft_limit_s: float) -> dict[int, float]:
    run = load_run(run_dir)
    out = {}
    for p in run.points:
        t = point_table(run.root, p.point_id)
        assert t is not None
        out[p.parallel] = float((t["success"] & (t["ttft_s"] <= ttft_limit_s)).mean())
    return out


def _best(attainment: dict[int, float]) -> str:
    meeting = [c for c, share in attainment.items() if share >= 0.9]
    return f"c{max(meeting)}" if meeting else "none"


def _limit_between_c1_and_c8(run_dir: Path) -> float:
    """A TTFT limit every c1 request meets and fewer than 90 % of c8 requests do."""
    run = load_run(run_dir)
    c1, c8 = (point_table(run.root, p.point_id) for p in run.points)
    assert c1 is not None and c8 is not None
    limit = (math.floor(float(c1["ttft_s"].max()) * 1000) + 1) / 1000  # whole ms above
    assert (c8["ttft_s"] <= limit).mean() < 0.9, "the workload no longer separates c1 from c8"
    return limit


def test_report_shows_each_arms_highest_concurrency_under_slo(runs, tmp_path):
    limit = _limit_between_c1_and_c8(runs["offload512"])
    slo = f"ttft={round(limit * 1000)}ms"
    expected = {arm: _best(_attainment(d, limit)) for arm, d in runs.items()}
    assert expected["offload512"] == "c1"
    out = tmp_path / "r.html"
    result = CliRunner().invoke(
        cli,
        [
            "report",
            str(runs["hisparse384"]),
            str(runs["offload512"]),
            "--out",
            str(out),
            "--slo",
            slo,
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(out)  # stdout stays the report's path
    for arm, run_id in (("hisparse384", "h"), ("offload512", "o")):
        assert (
            f"{run_id} ({arm}): highest concurrency meeting {parse_slo(slo).text()} for >= 90% "
            f"of requests: {expected[arm]}" in result.stderr
        )
    page = html_lib.unescape(out.read_text())
    assert 'id="objectives"' in page
    rows = re.findall(r"<tr><td class=\"k\">(\w+)</td>.*?<td><b>(\w+)</b></td>", page, re.DOTALL)
    assert dict(rows) == {"h": expected["hisparse384"], "o": expected["offload512"]}
    # per point attainment, as the tables give it
    share = _attainment(runs["offload512"], limit)
    assert f"c8: {share[8]:.0%}" in page and "c1: 100%" in page


def test_report_without_slo_uses_each_workloads_objectives(runs, tmp_path):
    out = tmp_path / "r.html"
    result = CliRunner().invoke(
        cli, ["report", str(runs["hisparse384"]), str(runs["offload512"]), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    # only hisparse384 names objectives (ttft=60s): every request meets them
    assert "h (hisparse384): highest concurrency meeting ttft=60s for >= 90% of requests: c8" in (
        result.stderr
    )
    assert "o (offload512)" not in result.stderr
    page = html_lib.unescape(out.read_text())
    assert "(sweep.slo)" in page and "<td><b>c8</b></td>" in page
    # no objectives anywhere: no section
    bare = tmp_path / "bare.html"
    result = CliRunner().invoke(cli, ["report", str(runs["offload512"]), "--out", str(bare)])
    assert result.exit_code == 0 and 'id="objectives"' not in bare.read_text()
    assert result.stderr == ""


def test_compare_prints_both_arms_and_refuses_bad_objectives(runs):
    result = CliRunner().invoke(
        cli, ["compare", str(runs["hisparse384"]), str(runs["offload512"]), "--slo", "ttft=1ms"]
    )
    assert result.exit_code == 0, result.output
    assert "h (hisparse384): highest concurrency meeting ttft=1ms for >= 90% of requests: none" in (
        result.stdout
    )
    assert "o (offload512): highest concurrency meeting ttft=1ms" in result.stdout
    bad = CliRunner().invoke(cli, ["report", str(runs["offload512"]), "--slo", "ttft=2"])
    assert bad.exit_code != 0
    assert "--slo: ttft='2'" in (bad.output + str(bad.exception))
