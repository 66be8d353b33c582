"""The coherence check inside the sweep: run right after readiness, recorded in the manifest, and
a check that does not pass invalidates every point of the arm unless --allow-incoherent.

The server here is the loopback fake, which returns no token ids: the check cannot judge it, and
"unjudged" must count as not passing. The judging itself runs against the real CPU vLLM in
tests/e2e/test_coherence_e2e.py.
"""

from __future__ import annotations

from pathlib import Path

from support.fake_openai import SETS

from harness.report.dashboard import write_report
from harness.results import load_run
from harness.run.console import show_run
from harness.run.sweep import SweepRequest, run_sweep

# SETS without "coherence=null": cpu-tiny's own coherence block stays on
WITH_CHECK = [s for s in SETS if not s.startswith("coherence")] + ["sweep.points=[[1,1],[2,2]]"]


def _sweep(url: str, dataset: Path, out: Path, run_id: str, **extra) -> Path:
    request = SweepRequest(
        "cpu-tiny",
        overrides=WITH_CHECK,
        dataset=str(dataset),
        url=url,
        out=out,
        run_id=run_id,
        **extra,
    )
    return run_sweep(request, echo=lambda _msg: None)


def test_an_unjudged_arm_has_every_point_invalid(fake_server, small_dataset, tmp_path) -> None:
    run = load_run(_sweep(fake_server(), small_dataset, tmp_path, "unjudged"))
    record = run.manifest.coherence
    assert record is not None and record.verdict == "unjudged"
    assert "no token_ids" in record.reason and record.allow_incoherent is False
    assert len(run.points) == 2
    for point in run.points:
        assert not point.valid
        assert point.invalid_reasons == [f"coherence unjudged: {record.reason}"]
    assert (tmp_path / "unjudged" / "coherence" / "result.json").is_file()


def test_allow_incoherent_counts_the_points_and_says_so(
    fake_server, small_dataset, tmp_path
) -> None:
    run = load_run(_sweep(fake_server(), small_dataset, tmp_path, "allowed", allow_incoherent=True))
    assert run.manifest.coherence.verdict == "unjudged"
    assert run.manifest.coherence.allow_incoherent is True
    assert [p.valid for p in run.points] == [True, True]


def test_the_verdict_is_in_runs_show_and_in_the_report(
    fake_server, small_dataset, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("REPRO_DASHBOARDS", str(tmp_path / "dashboards"))
    run_dir = _sweep(fake_server(), small_dataset, tmp_path, "shown")
    assert "coherence: unjudged: could not judge" in show_run(run_dir)
    html = write_report([run_dir]).read_text(encoding="utf-8")
    assert "unjudged: could not judge" in html
