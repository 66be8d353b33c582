"""The nightly's decision logic on synthetic runs: first run -> new baseline, suspicious points
rerun once (a breach again -> regression, otherwise cleared), history states, the summary.

The rerun callback writes a synthetic run directory, standing in for run_sweep(only_points=...)
so that the outcome of the rerun can be chosen; the real loop runs in tests/e2e/test_nightly_e2e.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.gate_runs import BLOG_POINTS, write_run

from harness.gate.history import History
from harness.gate.nightly import ArmResult, NightlyResult, judge_arm, record_arm, render_summary
from harness.gate.regress import IncomparableError

POLICY = Path(__file__).resolve().parents[2] / "launch/policies/default.yaml"


def _seed_history(tmp_path: Path, db: Path, nights: int = 3) -> History:
    history = History.open(db)
    rng = np.random.default_rng(0)
    for i in range(nights):
        run = write_run(tmp_path, f"night{i}", rng, sigma=0.005)
        arm = ArmResult("hisparse384", run_dir=run)
        judge_arm(arm, history, POLICY, rerun=_no_rerun, echo=print)
        record_arm(arm, history)
    return history


def _no_rerun(labels: list[str]) -> Path:
    raise AssertionError(f"unexpected rerun of {labels}")


def test_first_night_becomes_the_baseline(tmp_path: Path):
    history = History.open(tmp_path / "h.sqlite")
    run = write_run(tmp_path, "first", np.random.default_rng(1))
    arm = ArmResult("hisparse384", run_dir=run)
    judge_arm(arm, history, POLICY, rerun=_no_rerun, echo=print)
    record_arm(arm, history)
    assert arm.status == "new" and arm.history_state == "accepted"
    assert history.entry("first").state == "accepted"
    summary = render_summary(NightlyResult("STAMP", "cpu-0.32.0", {}, [arm]))
    assert "### hisparse384: 🆕 baseline" in summary and "| c32 r0 | 27.2 |" in summary


def test_suspicious_points_are_rerun_and_confirmed_or_cleared(tmp_path: Path):
    history = _seed_history(tmp_path, tmp_path / "h.sqlite")
    reruns: list[list[str]] = []

    def rerun_factory(step: float):
        def rerun(labels: list[str]) -> Path:
            reruns.append(labels)
            points = [p for p in BLOG_POINTS if f"c{p[0]}" in labels]
            return write_run(
                tmp_path,
                f"rerun{len(reruns)}",
                np.random.default_rng(9),
                points=points,
                steps={"occupancy": step},
            )

        return rerun

    # Night 4: occupancy 7 % down everywhere (inside the 5..10 % band of the 10 % threshold).
    tonight = write_run(tmp_path, "night3", np.random.default_rng(3), steps={"occupancy": -0.07})
    arm = ArmResult("hisparse384", run_dir=tonight)
    judge_arm(arm, history, POLICY, rerun=rerun_factory(0.0), echo=print)  # rerun is clean
    # c1 and c8 move less than the 0.5-request floor: only c16..c32 are suspicious.
    assert reruns == [["c16", "c24", "c32"]]
    assert arm.status in ("ok", "improvement")  # cleared by the rerun
    assert any("cleared" in r.reason for r in arm.verdict.rows if r.metric == "occupancy")

    tonight = write_run(tmp_path, "night4", np.random.default_rng(4), steps={"occupancy": -0.07})
    arm = ArmResult("hisparse384", run_dir=tonight)
    judge_arm(arm, history, POLICY, rerun=rerun_factory(-0.2), echo=print)  # breaches again
    assert arm.status == "regression" and arm.verdict.regressed_metrics() == ["occupancy"]
    assert arm.rerun_dir is not None and arm.rerun_dir.name == "rerun2"
    record_arm(arm, history)
    assert history.entry("night4").state == "rejected"
    assert "occupancy" in history.entry("night4").reason
    # A rejected night never becomes part of the baseline.
    key = arm.key
    assert "night4" not in [e.run_id for e in history.baseline(key, 10)]

    summary = render_summary(NightlyResult("STAMP", "nightly@" + "a" * 40, {}, [arm]))
    assert "🔴 regression" in summary and "regressed: occupancy" in summary
    assert "exit code 1" in summary


def test_invalid_points_are_an_error_and_rejected(tmp_path: Path):
    history = _seed_history(tmp_path, tmp_path / "h.sqlite", nights=1)
    broken = write_run(tmp_path, "broken", np.random.default_rng(5), invalid={"c32"})
    arm = ArmResult("hisparse384", run_dir=broken)
    with pytest.raises(IncomparableError) as exc:
        judge_arm(arm, history, POLICY, rerun=_no_rerun, echo=print)
    arm.status, arm.error = "error", str(exc.value)  # what run_nightly does with it
    record_arm(arm, history)
    assert arm.status == "error" and "c32 is invalid" in arm.error
    assert history.entry("broken").state == "rejected"
    assert NightlyResult("S", "b", {}, [arm]).exit_code == 2


def _rerun_writer(tmp_path: Path, step: float, reruns: list[list[str]]):
    def rerun(labels: list[str]) -> Path:
        reruns.append(labels)
        points = [p for p in BLOG_POINTS if f"c{p[0]}" in labels]
        name = f"confirm{len(reruns)}"
        rng = np.random.default_rng(11)
        return write_run(tmp_path, name, rng, points=points, steps={"occupancy": step})

    return rerun


def test_a_regression_on_one_value_against_a_short_history_is_confirmed_by_a_rerun(tmp_path: Path):
    """One baseline run and one repeat give no noise estimate: the breach is provisional."""
    history = _seed_history(tmp_path, tmp_path / "h.sqlite", nights=1)
    reruns: list[list[str]] = []

    noisy = write_run(tmp_path, "noisy", np.random.default_rng(3), steps={"occupancy": -0.3})
    arm = ArmResult("hisparse384", run_dir=noisy)
    judge_arm(arm, history, POLICY, rerun=_rerun_writer(tmp_path, 0.0, reruns), echo=print)
    assert reruns == [["c8", "c16", "c24", "c32"]]  # c1, c4 move less than the 0.5-request floor
    assert arm.status != "regression", arm.verdict.rows
    occupancy = [r for r in arm.verdict.rows if r.metric == "occupancy" and r.point == "c32"]
    assert (
        "not confirmed" in occupancy[0].reason
        and "fewer than 3 baseline runs" in occupancy[0].reason
    )

    real = write_run(tmp_path, "real", np.random.default_rng(4), steps={"occupancy": -0.3})
    arm = ArmResult("hisparse384", run_dir=real)
    judge_arm(arm, history, POLICY, rerun=_rerun_writer(tmp_path, -0.3, reruns), echo=print)
    assert len(reruns) == 2 and arm.status == "regression"
    assert arm.verdict.regressed_metrics() == ["occupancy"]
    c32 = next(r for r in arm.verdict.rows if r.metric == "occupancy" and r.point == "c32")
    assert c32.reason.startswith("rerun confirm2: confirmed;"), c32.reason


def test_a_breach_beyond_a_long_historys_spread_needs_no_rerun(tmp_path: Path):
    history = _seed_history(tmp_path, tmp_path / "h.sqlite", nights=3)
    tonight = write_run(tmp_path, "drop", np.random.default_rng(5), steps={"occupancy": -0.3})
    arm = ArmResult("hisparse384", run_dir=tonight)
    judge_arm(arm, history, POLICY, rerun=_no_rerun, echo=print)
    assert arm.status == "regression" and arm.rerun_dir is None
    assert all(r.noise_tested for r in arm.verdict.rows)
