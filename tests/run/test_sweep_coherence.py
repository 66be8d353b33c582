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

# SETS without "coherence=null": cpu-tiny's own coherence block stays on. One point each (every
# point starts the real evalscope client, ~2 s); "every point" is checked on two, once.
WITH_CHECK = [s for s in SETS if not s.startswith("coherence")] + ["sweep.points=[[2,2]]"]
TWO_POINTS = "sweep.points=[[1,1],[2,2]]"  # the last setting of a key wins


def _sweep(url: str, dataset: Path, out: Path, run_id: str, *sets: str, **extra) -> Path:
    request = SweepRequest(
        "cpu-tiny",
        overrides=[*WITH_CHECK, *sets],
        dataset=str(dataset),
        url=url,
        out=out,
        run_id=run_id,
        **extra,
    )
    return run_sweep(request, echo=lambda _msg: None)


def test_an_unjudged_arm_has_every_point_invalid_and_says_so_in_runs_show_and_the_report(
    fake_server, small_dataset, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("REPRO_DASHBOARDS", str(tmp_path / "dashboards"))
    run_dir = _sweep(fake_server(), small_dataset, tmp_path, "unjudged", TWO_POINTS)
    run = load_run(run_dir)
    record = run.manifest.coherence
    assert record is not None and record.verdict == "unjudged"
    assert "no token_ids" in record.reason and record.allow_incoherent is False
    assert len(run.points) == 2
    for point in run.points:
        assert not point.valid
        assert point.invalid_reasons == [f"coherence unjudged: {record.reason}"]
    assert (tmp_path / "unjudged" / "coherence" / "result.json").is_file()
    assert "coherence: unjudged: could not judge" in show_run(run_dir)
    html = write_report([run_dir]).read_text(encoding="utf-8")
    assert "unjudged: could not judge" in html


def test_allow_incoherent_counts_the_points_and_says_so(
    fake_server, small_dataset, tmp_path
) -> None:
    run = load_run(_sweep(fake_server(), small_dataset, tmp_path, "allowed", allow_incoherent=True))
    assert run.manifest.coherence.verdict == "unjudged"
    assert run.manifest.coherence.allow_incoherent is True
    assert [p.valid for p in run.points] == [True]


def _tiny_replies(run: Path) -> Path:
    from harness.coherence.client import Reply
    from harness.coherence.probes import load_probe_set
    from harness.coherence.store import ReplySet, write_replies

    probe_set = load_probe_set("tiny-v1")
    replies = ReplySet(
        arm="cpu-tiny-mtp-nomtp",
        probe_set="tiny-v1",
        probe_set_sha256=probe_set.sha256,
        replies=[Reply(id=p.id, token_ids=[5, 6]) for p in probe_set.probes],
    )
    return write_replies(run / "coherence" / "replies.json", replies)


def test_coherence_against_a_run_is_used_and_recorded(fake_server, small_dataset, tmp_path) -> None:
    reference_run = tmp_path / "reference-run"
    _tiny_replies(reference_run)
    run = load_run(
        _sweep(
            fake_server(),
            small_dataset,
            tmp_path,
            "against",
            coherence_against=str(reference_run),
        )
    )
    assert run.manifest.coherence_against == str(reference_run)
    assert f"coherence: judged against {reference_run} (--coherence-against)" in run.manifest.notes
    record = run.manifest.coherence
    # the fake returns no token ids: unjudged, but against the run's replies, not the profile's
    # (the judging itself: tests/e2e/test_coherence_e2e.py)
    assert record.reference == str(reference_run) and record.verdict == "unjudged"
    assert run.points and not any(p.valid for p in run.points)


def test_a_missing_reference_refuses_the_sweep_unless_allowed(
    fake_server, small_dataset, tmp_path
) -> None:
    import pytest

    from harness.coherence.references import MissingReference

    url = fake_server()
    store_less = ["coherence.reference=cpu-tiny-mtp"]  # nothing recorded for cpu-tiny-mtp
    request = SweepRequest(
        "cpu-tiny",
        overrides=[*WITH_CHECK, *store_less],
        dataset=str(small_dataset),
        url=url,
        out=tmp_path / "runs",
        run_id="refused",
    )
    with pytest.raises(MissingReference, match="coherence reference cpu-tiny-mtp has no recorded"):
        run_sweep(request, echo=lambda _msg: None)
    assert not (tmp_path / "runs").exists()  # nothing written
    seen: list[str] = []
    allowed = SweepRequest(**{**request.__dict__, "allow_incoherent": True, "run_id": "allowed"})
    run = load_run(run_sweep(allowed, echo=seen.append))
    warning = [n for n in run.manifest.notes if "has no recorded replies" in n]
    assert len(warning) == 1 and "--allow-incoherent: the points count unjudged" in warning[0]
    assert f"warning: coherence: {warning[0]}" in seen
    assert run.manifest.coherence.verdict == "unjudged"
    assert [p.valid for p in run.points] == [True]
