"""Faults a real vLLM cannot produce on demand, against a tiny loopback fake OpenAI server:
an endpoint that answers HTTP 500 (EvalScope exits 0 but reports failures -> point invalid), and a
/metrics endpoint that hangs or fails (gaps recorded, the point still completes and is valid).

The client is the real pinned `evalscope perf`; the scraper, metrics and results code are real.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.fake_openai import SETS

from harness.results import load_run
from harness.run.sweep import SweepRequest, run_sweep


def test_http_500_endpoint_makes_points_invalid(fake_server, small_dataset, tmp_path):
    url = fake_server(mode="chat500")
    run_dir = run_sweep(
        SweepRequest(
            "cpu-tiny",
            overrides=SETS,
            dataset=str(small_dataset),
            url=url,
            out=tmp_path,
            run_id="r500",
        ),
        echo=lambda _: None,
    )
    run = load_run(run_dir)
    assert run.manifest.status == "complete"
    assert [p.point_id for p in run.points] == ["p001-n0001-r0", "p002-n0002-r0"]
    for point in run.points:
        assert point.client_exit_code == 0  # EvalScope exits 0 on request failures
        assert point.client is not None and point.client.failed_requests > 0
        assert not point.valid
        assert any("failed requests" in r for r in point.invalid_reasons)
        assert any("warm-up" in n for n in point.notes)  # the warm-up got a 500 as well
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [row["valid"] for row in summary["rows"]] == [False, False]

    # The run is visible to `repro runs list|show`.
    from click.testing import CliRunner

    from harness.cli import cli

    listed = CliRunner().invoke(cli, ["runs", "list", "--out", str(tmp_path)])
    assert listed.exit_code == 0, listed.output
    assert "r500" in listed.output and "0/2/2" in listed.output
    shown = CliRunner().invoke(cli, ["runs", "show", str(run_dir)])
    assert shown.exit_code == 0, shown.output
    assert "p002-n0002-r0" in shown.output and "NO" in shown.output


def test_failing_metrics_endpoint_records_gaps_and_point_completes(
    fake_server, small_dataset, tmp_path
):
    url = fake_server(metrics_mode="flaky")
    sets = [*SETS, "sweep.points=[[2,4]]", "sweep.max_tokens=200", "sweep.scrape_interval_s=1"]
    run_dir = run_sweep(
        SweepRequest(
            "cpu-tiny",
            overrides=sets,
            dataset=str(small_dataset),
            url=url,
            out=tmp_path,
            run_id="gaps",
        ),
        echo=lambda _: None,
    )
    (point,) = load_run(run_dir).points
    assert point.valid, point.invalid_reasons
    assert point.client.total_requests == point.expected_requests == 8
    assert point.scrape_gaps >= 1
    assert point.samples >= 1  # every third scrape succeeds
    gaps = json.loads((run_dir / "points" / point.point_id / "scrape_gaps.json").read_text())
    assert len(gaps) == point.scrape_gaps
    assert any("HTTP 500" in g["reason"] for g in gaps)
    assert any("Timeout" in g["reason"] for g in gaps)
    # A single good sample cannot yield a counter delta: null, never 0.
    assert point.metrics["preemptions"] in (None, 0.0)
    assert point.metrics["interactivity"] is not None


def test_existing_run_dir_is_never_overwritten(fake_server, small_dataset, tmp_path):
    (tmp_path / "taken").mkdir()
    from harness.errors import RunError

    with pytest.raises(RunError, match="never overwritten"):
        run_sweep(
            SweepRequest(
                "cpu-tiny",
                overrides=SETS,
                dataset=str(small_dataset),
                url=fake_server(),
                out=tmp_path,
                run_id="taken",
            ),
            echo=lambda _: None,
        )


def test_point_timeout_kills_the_client_group_and_invalidates(fake_server, small_dataset, tmp_path):
    url = fake_server(mode="hang")
    sets = [*SETS, "sweep.points=[[1,1]]", "sweep.point_timeout_s=3"]
    run_dir = run_sweep(
        SweepRequest(
            "cpu-tiny",
            overrides=sets,
            dataset=str(small_dataset),
            url=url,
            out=tmp_path,
            run_id="timeout",
        ),
        echo=lambda _: None,
    )
    (point,) = load_run(run_dir).points
    assert not point.valid
    assert any("timed out after 3s" in r for r in point.invalid_reasons)
    assert point.client_exit_code != 0
    # Nothing of the client survives: its command line names this run's folder.
    leftovers = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if str(run_dir) in cmd:
                leftovers.append(entry.name)
    assert leftovers == []


def test_resume_from_the_cli_needs_no_profile_and_refuses_another(partial_run):
    from click.testing import CliRunner

    from harness.cli import cli

    runner = CliRunner()
    result = runner.invoke(cli, ["sweep"])
    assert result.exit_code == 2 and "--resume RUN_DIR" in result.output

    run = partial_run  # cut after its first point: status partial
    result = runner.invoke(cli, ["sweep", "--resume", str(run), "--profile", "cpu-tiny-mtp"])
    assert result.exit_code != 0
    assert "the run used profile 'cpu-tiny'" in str(result.exception)
    result = runner.invoke(cli, ["sweep", "--resume", str(run), "--no-report"])
    assert result.exit_code == 0, result.output
    finished = load_run(run)
    assert finished.manifest.status == "complete"
    assert sorted(p.point_id for p in finished.points) == ["p001-n0001-r0", "p002-n0002-r0"]
