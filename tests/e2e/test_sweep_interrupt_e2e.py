"""Ctrl-C or SIGKILL on `repro sweep` with the server it launched itself: the whole server process
group and the client go away, the run is marked partial (Ctrl-C) or listed stale (SIGKILL: its
owner died without a word), and `--resume` finishes it with a new server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from procs import children, group_alive

from harness.results import load_run
from harness.serve.server import free_port

REPRO = [str(Path(sys.executable).parent / "repro")]  # the console script a user runs
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


# How long to wait for processes to go: an upper bound for a hang, not a speed verdict (a loaded
# machine is slow to reap; what is checked is that they go).
GONE_WITHIN_S = 120.0


def _sweep_until_client_runs(tmp_path: Path, run_id: str) -> tuple[subprocess.Popen, dict, Path]:
    """`repro sweep` with its own server, started as a user starts it, once a point's client
    runs against that server, with the server's engine frozen (SIGSTOP) so that the point cannot
    end before the test's signal; returns the process, the process groups (server, client) and
    pids (engine) and the log. The caller continues the engine (`_thaw`) once the signal is
    sent, so the server's shutdown is the one a user's interrupt meets."""
    port = free_port()
    command = [
        *REPRO,
        "sweep",
        "--profile",
        "cpu-tiny",
        "--set",
        "sweep.points=[[1,2],[2,4]]",
        "--set",
        "serve.enforce-eager=true",  # compilation is not what these tests are about
        "--out",
        str(tmp_path / "results"),
        "--run-id",
        run_id,
        "--port",
        str(port),
        "--no-report",
    ]
    log_path = tmp_path / f"{run_id}.log"
    with log_path.open("w") as log:
        sweep = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=ENV)
    groups: dict[str, int] = {}
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and sweep.poll() is None:
        for pgid, cmd in children(sweep.pid).values():
            if " serve " in cmd and f"--port {port}" in cmd:
                groups["server"] = pgid
            elif "evalscope" in cmd and " perf " in cmd:
                groups["client"] = pgid
        if len(groups) == 2:
            break
        time.sleep(0.5)
    assert sweep.poll() is None, log_path.read_text()[-3000:]
    assert set(groups) == {"server", "client"}
    # Frozen, the engine finishes no request, so the point is cut mid-way on any machine. A
    # trigger on the /metrics count of finished requests raced the engine: a busy API server
    # answers /metrics late, after more of the point (or all of it) has ended.
    engines = [p for p, (_, cmd) in children(groups["server"]).items() if "EngineCore" in cmd]
    assert engines, "no engine process under the server"
    os.kill(engines[0], signal.SIGSTOP)
    groups["engine"] = engines[0]
    return sweep, groups, log_path


def _thaw(groups: dict[str, int]) -> None:
    try:
        os.kill(groups["engine"], signal.SIGCONT)
    except ProcessLookupError:
        pass  # already gone with its group


def _gone_within(groups: dict[str, int], seconds: float) -> None:
    stop_by = time.monotonic() + seconds
    while time.monotonic() < stop_by and any(group_alive(g) for g in groups.values()):
        time.sleep(0.2)
    assert not group_alive(groups["server"]), "vLLM process group outlived the harness"
    assert not group_alive(groups["client"]), "EvalScope client outlived the harness"


def _resume_finishes(run: Path) -> None:
    resumed = subprocess.run(
        [*REPRO, "sweep", "--resume", str(run), "--no-report"],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    finished = load_run(run)
    assert finished.manifest.status == "complete"
    assert sorted(p.point_id for p in finished.points) == ["p001-n0002-r0", "p002-n0004-r0"]
    assert all(p.valid for p in finished.points), [p.invalid_reasons for p in finished.points]
    # The half-run first attempt was set aside, not overwritten or deleted.
    assert [p.name for p in (run / "attempts").iterdir()] == ["p001-n0002-r0-0"]


def test_ctrl_c_stops_server_and_client_then_resume_finishes(cpu_build, tmp_path):
    sweep, groups, log_path = _sweep_until_client_runs(tmp_path, "ctrlc")
    try:
        sweep.send_signal(signal.SIGINT)  # what Ctrl-C delivers to the foreground process
        deadline = time.monotonic() + 120
        while "interrupted" not in log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        _thaw(groups)  # the harness has taken the interrupt: the point can no longer finish
        code = sweep.wait(timeout=120)
    finally:
        _thaw(groups)
        if sweep.poll() is None:
            sweep.kill()
    output = log_path.read_text()
    assert code == 130, output[-3000:]
    assert "interrupted" in output
    _gone_within(groups, GONE_WITHIN_S)
    run = tmp_path / "results" / "ctrlc"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "partial"
    assert not (run / "points" / "p001-n0002-r0" / "point.json").exists()  # cut mid-point
    _resume_finishes(run)


def test_sigkilled_sweep_takes_server_and_client_and_its_run_is_stale_then_resumes(
    cpu_build, tmp_path
):
    sweep, groups, _log = _sweep_until_client_runs(tmp_path, "killed")
    sweep.kill()  # SIGKILL: no handler runs, nothing in the harness can clean up
    sweep.wait(timeout=30)
    _thaw(groups)  # the sweep is gone: the point can no longer be recorded
    _gone_within(groups, GONE_WITHIN_S)  # the watchdog's parent-death signal stops both groups
    run = tmp_path / "results" / "killed"
    assert json.loads((run / "manifest.json").read_text())["status"] == "running"
    listed = subprocess.run(
        [*REPRO, "runs", "list", "--out", str(tmp_path / "results")],
        env=ENV,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert any(line.split()[:2] == ["killed", "stale"] for line in listed.splitlines()), listed
    _resume_finishes(run)
