"""Ctrl-C on `repro sweep` with the server it launched itself: the whole server process group and
the client go away, the run is marked partial, and `--resume` finishes it with a new server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from procs import children, group_alive

from harness.results import load_run
from harness.serve.server import free_port

pytestmark = pytest.mark.e2e

REPRO = [str(Path(sys.executable).parent / "repro")]  # the console script a user runs


def test_ctrl_c_stops_server_and_client_then_resume_finishes(cpu_build, tmp_path):
    port = free_port()
    run = tmp_path / "results" / "ctrlc"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [
        *REPRO,
        "sweep",
        "--profile",
        "cpu-tiny",
        "--set",
        "sweep.points=[[1,2],[2,4]]",
        "--out",
        str(tmp_path / "results"),
        "--run-id",
        "ctrlc",
        "--port",
        str(port),
        "--no-report",
    ]
    log = (tmp_path / "sweep.log").open("w")
    sweep = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    groups: dict[str, int] = {}
    deadline = time.monotonic() + 900
    try:
        # Wait until the first point's client is running against the launched server.
        while time.monotonic() < deadline and sweep.poll() is None:
            for pgid, cmd in children(sweep.pid).values():
                if " serve " in cmd and f"--port {port}" in cmd:
                    groups["server"] = pgid
                elif "evalscope" in cmd and " perf " in cmd:
                    groups["client"] = pgid
            if len(groups) == 2:
                break
            time.sleep(0.5)
        assert sweep.poll() is None, (tmp_path / "sweep.log").read_text()[-3000:]
        assert set(groups) == {"server", "client"}
        time.sleep(2)  # requests in flight
        sweep.send_signal(signal.SIGINT)  # what Ctrl-C delivers to the foreground process
        code = sweep.wait(timeout=120)
    finally:
        if sweep.poll() is None:
            sweep.kill()
        log.close()
    output = (tmp_path / "sweep.log").read_text()
    assert code == 130, output[-3000:]
    assert "interrupted" in output
    stop_by = time.monotonic() + 10
    while time.monotonic() < stop_by and any(group_alive(g) for g in groups.values()):
        time.sleep(0.2)
    assert not group_alive(groups["server"]), "vLLM process group outlived Ctrl-C"
    assert not group_alive(groups["client"]), "EvalScope client outlived Ctrl-C"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "partial"
    assert not (run / "points" / "p001-n0002-r0" / "point.json").exists()  # cut mid-point

    resumed = subprocess.run(
        [*REPRO, "sweep", "--resume", str(run), "--no-report"],
        env=env,
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
