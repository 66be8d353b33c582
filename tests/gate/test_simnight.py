"""The simulated nightly (issue 13 item 5): the GLM arms through `repro simulate`, gated exactly
against the accepted simulated history and the blog's claims."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from harness.analysis import metrics
from harness.cli import cli
from harness.errors import ConfigError, ReproError
from harness.gate.history import DEFAULT_SIMULATED_HISTORY, SimulatedHistory
from harness.gate.simnight import DEFAULT_CALIBRATION, GLM_ARMS, run_sim_nightly
from harness.paths import REPO_ROOT

# The gate's mechanics need a point with queueing (c8), not the blog's whole sweep: c1 and c8 cost
# 0.2 s of simulation against 3.6 s for c1-c32. The committed history's test runs full size.
REDUCED_POINTS = ["c1", "c8"]
# The blog's claims are about c24-c32, absent here (a missing point fails a claim); the reduced
# nights are judged on claims about their own points, one per arm, so both verdicts are exercised.
REDUCED_CLAIMS = """\
description: the simulated nightly's mechanics on c1 and c8
source: tests/gate/test_simnight.py
arms:
  hisparse: {profiles: [hisparse384]}
  offloading: {profiles: [offload512]}
claims:
  - id: hisparse-c8-occupancy
    text: At c8 HiSparse keeps at least 4 requests running
    left: {arm: hisparse, point: c8, metric: occupancy}
    op: ">="
    value: 4
  - id: c1-parity
    text: At c1 HiSparse costs nothing against offloading
    left: {arm: hisparse, point: c1, metric: throughput_per_gpu}
    op: ">="
    right: {arm: offloading, point: c1, metric: throughput_per_gpu}
    factor: 0.9
"""


def _night(tmp_path, name, accepted, **kwargs):
    kwargs.setdefault("profiles", ["hisparse384"])
    kwargs.setdefault("points", REDUCED_POINTS)
    if "claims_path" not in kwargs:
        kwargs["claims_path"] = tmp_path / "reduced-claims.yaml"
        kwargs["claims_path"].write_text(REDUCED_CLAIMS, encoding="utf-8")
    return run_sim_nightly(
        kwargs.pop("profiles"),
        accepted_path=accepted,
        out=tmp_path / name,
        summary_path=tmp_path / name / "summary.md",
        dashboard=False,
        echo=lambda _msg: None,
        **kwargs,
    )


@pytest.fixture(scope="module")
def accepted_once(tmp_path_factory):
    """A history with one accepted hisparse384 entry (the current code's values), simulated
    once per module: each test gets its own copy, as several append to it."""
    root = tmp_path_factory.mktemp("simnight")
    path = root / "accepted.jsonl"
    first = _night(root, "n0", path, accept=True, reason="first figure")
    assert first.exit_code == 0 and first.appended == ["hisparse384"]
    return path


@pytest.fixture
def accepted(tmp_path, accepted_once):
    path = tmp_path / "accepted.jsonl"
    shutil.copyfile(accepted_once, path)
    return path


def test_the_committed_history_matches_the_code(tmp_path):
    """The push job's own command: every GLM arm identical to its last accepted entry, every
    claim holding. A change that moves the simulated blog figure must update the history file
    (`repro nightly --engine sim --accept --reason ...`) in the same commit."""
    assert {e.arm for e in SimulatedHistory.open(DEFAULT_SIMULATED_HISTORY).entries} == set(
        GLM_ARMS
    )
    before = DEFAULT_SIMULATED_HISTORY.read_bytes()
    summary = tmp_path / "night.md"
    env = {**os.environ, "REPRO_NIGHTLY_BOOTSTRAP": "0", "REPRO_DASHBOARDS": str(tmp_path)}
    env.pop("GITHUB_STEP_SUMMARY", None)
    args = ["--engine", "sim", "--out", str(tmp_path), "--summary", str(summary)]
    done = subprocess.run(
        [str(REPO_ROOT / "scripts" / "nightly.sh"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    record = json.loads(summary.with_suffix(".json").read_text(encoding="utf-8"))
    statuses = {a["profile"]: a["status"] for a in record["arms"]}
    changed = {a["profile"]: a["differences"][:3] for a in record["arms"] if a["differences"]}
    assert statuses == dict.fromkeys(GLM_ARMS, "identical"), changed
    assert record["claims"] and all(c["status"] == "holds" for c in record["claims"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert DEFAULT_SIMULATED_HISTORY.read_bytes() == before


def test_identical_rerun_passes_and_the_history_is_unchanged(tmp_path, accepted):
    before = accepted.read_bytes()
    night = _night(tmp_path, "n1", accepted)
    assert [a.status for a in night.arms] == ["identical"]
    assert night.exit_code == 0
    assert accepted.read_bytes() == before
    summary = (tmp_path / "n1" / "summary.md").read_text(encoding="utf-8")
    assert "✅ identical" in summary and "exit code 0" in summary
    assert all(c.status == "holds" for c in night.claims if c.status != "skipped")


def test_an_analysis_change_that_moves_the_figure_is_caught(tmp_path, accepted, monkeypatch):
    """Same inputs, different analysis code: an off-by-one in the scrape window (the first
    scrape dropped) moves occupancy and waiting; the gate names the cells and the cause."""
    real = metrics.gauge_per_scrape
    monkeypatch.setattr(metrics, "gauge_per_scrape", lambda *a, **k: real(*a, **k)[1:])
    night = _night(tmp_path, "n2", accepted)
    (arm,) = night.arms
    assert arm.status == "changed" and night.exit_code == 1
    assert arm.input_changes == []
    fields = {d.field for d in arm.differences}
    assert "metrics.waiting_mean" in fields
    assert not any(f.startswith("client.") for f in fields)  # the client side did not move
    summary = (tmp_path / "n2" / "summary.md").read_text(encoding="utf-8")
    assert "🔴 changed" in summary and "same inputs: the code changed" in summary
    assert "metrics.waiting_mean" in summary


def test_a_calibration_change_is_caught_and_named(tmp_path, accepted):
    text = DEFAULT_CALIBRATION.read_text(encoding="utf-8")
    assert "step_overhead_ms: " in text
    lines = [
        "  step_overhead_ms: 4.0" if line.startswith("  step_overhead_ms: ") else line
        for line in text.splitlines()
    ]
    moved = tmp_path / "cal.yaml"
    moved.write_text("\n".join(lines) + "\n", encoding="utf-8")
    night = _night(tmp_path, "n3", accepted, calibration=moved)
    (arm,) = night.arms
    assert arm.status == "changed" and night.exit_code == 1
    assert any(c.startswith("calibration ") for c in arm.input_changes)
    fields = [d.field for d in arm.differences]
    assert "metrics.interactivity" in fields and "metrics.throughput_per_gpu" in fields
    # The figure's coordinates lead the table.
    assert fields[0] in ("metrics.occupancy", "metrics.interactivity")


def test_accept_appends_only_what_changed_and_then_passes(tmp_path, accepted):
    more = _night(
        tmp_path, "n4", accepted, profiles=["hisparse384", "offload512"], accept=True, reason="r"
    )
    assert [a.status for a in more.arms] == ["identical", "new"]
    assert more.appended == ["offload512"] and more.exit_code == 0
    entries = SimulatedHistory.open(accepted).entries
    assert [e.arm for e in entries] == ["hisparse384", "offload512"]
    assert entries[-1].reason == "r" and entries[-1].points
    again = _night(tmp_path, "n5", accepted, profiles=["hisparse384", "offload512"])
    assert [a.status for a in again.arms] == ["identical", "identical"]
    assert again.exit_code == 0


def test_a_new_arm_without_an_accepted_entry_fails(tmp_path):
    night = _night(tmp_path, "n6", tmp_path / "none.jsonl")
    assert [a.status for a in night.arms] == ["new"] and night.exit_code == 1
    assert not (tmp_path / "none.jsonl").exists()


def test_accept_needs_a_reason(tmp_path):
    with pytest.raises(ReproError, match="--reason"):
        _night(tmp_path, "n7", tmp_path / "a.jsonl", accept=True)


def test_a_malformed_history_names_the_file_line_and_key(tmp_path, accepted):
    lines = accepted.read_text(encoding="utf-8").splitlines()
    entry = json.loads(lines[0])
    entry["surprise"] = 1
    accepted.write_text(lines[0] + "\n" + json.dumps(entry) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"accepted\.jsonl:2: surprise: Extra inputs"):
        _night(tmp_path, "n8", accepted)


def test_cli_refuses_options_the_simulated_engine_does_not_use(tmp_path):
    runner = CliRunner()
    result = runner.invoke(cli, ["nightly", "--engine", "sim", "--build", "cpu-0.32.0"])
    assert result.exit_code == 2 and "--build: not used by --engine sim" in result.output
    result = runner.invoke(cli, ["nightly", "--profiles", "cpu-tiny", "--build", "x", "--accept"])
    assert result.exit_code == 2 and "--accept: only with --engine sim" in result.output


def test_cli_gate_exit_codes(tmp_path, accepted):
    claims = tmp_path / "claims.yaml"
    claims.write_text(REDUCED_CLAIMS, encoding="utf-8")
    args = ["nightly", "--engine", "sim", "--profiles", "hisparse384", "--no-dashboard"]
    args += ["--points", ",".join(REDUCED_POINTS), "--claims", str(claims)]
    # Separate --out per night: run ids are stamped to the second, and a simulation never
    # writes into an existing run directory.
    result = CliRunner().invoke(
        cli, [*args, "--out", str(tmp_path / "cli1"), "--accepted", str(accepted)]
    )
    assert result.exit_code == 0, result.output
    assert "✅ identical" in result.output
    other = ["--out", str(tmp_path / "cli2"), "--accepted", str(tmp_path / "other.jsonl")]
    result = CliRunner().invoke(cli, [*args, *other])
    assert result.exit_code == 1 and "🆕 new" in result.output
    # Fewer points than the accepted entry: the others are reported missing, never passed over.
    fewer = [a if a != ",".join(REDUCED_POINTS) else "c8" for a in args]
    result = CliRunner().invoke(
        cli, [*fewer, "--out", str(tmp_path / "cli3"), "--accepted", str(accepted)]
    )
    assert result.exit_code == 1 and "🔴 changed" in result.output
    assert "p001-n0004-r0" in result.output and "missing" in result.output
