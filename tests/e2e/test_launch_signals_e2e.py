"""`repro launch` with a real CPU vLLM server, started the way scripts start it.

- A non-interactive shell starts background jobs with SIGINT ignored; `kill -INT` must still stop
  the harness and its server (the handler is installed explicitly).
- A harness killed with SIGKILL must not leave its server (its own process group) running.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.serve.server import free_port, group_and_descendants, port_is_free

READY_S = 900.0


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pids: set[int], timeout_s: float) -> set[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    return {p for p in pids if _alive(p)}


def _launch_argv(port: int, log_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-c",
        "from harness.cli import main; main()",
        "launch",
        "--profile",
        "cpu-tiny",
        "--port",
        str(port),
        "--log-dir",
        str(log_dir),
        "--set",
        "serve.enforce-eager=true",
    ]


def _wait_ready(out: Path, harness_pid: int, log_dir: Path) -> dict:
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if out.exists() and out.read_text().startswith("ready "):
            return json.loads((log_dir / "launch.json").read_text())
        assert _alive(harness_pid), (log_dir / "err.txt").read_text()[-3000:]
        time.sleep(0.5)
    raise AssertionError(f"no ready line in {READY_S} s")


def _cmdline_once_execed(pid: int, timeout_s: float = 10.0) -> str:
    """/proc/PID/cmdline, read again while it is empty: in the middle of an execve (bash ->
    setsid -> python) it reads empty (seen once in CI right after `echo $!`)."""
    deadline = time.monotonic() + timeout_s
    text = ""
    while time.monotonic() < deadline:
        text = Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
        if text:
            return text
        time.sleep(0.05)
    return text


def _sigint_ignored(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    return False


def test_background_launch_from_a_script_stops_on_sigint(cpu_build, tmp_path: Path) -> None:
    port = free_port()
    out, err, pidfile = tmp_path / "out.txt", tmp_path / "err.txt", tmp_path / "pid"
    script = (
        f"setsid {' '.join(repr(a) for a in _launch_argv(port, tmp_path))} "
        f">{out} 2>{err} &\necho $! >{pidfile}\n"
    )
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    # the condition under test: a script's background job starts with SIGINT ignored. Both of
    # the sleeper's outputs go to /dev/null: holding the captured stderr pipe, it kept this run
    # waiting its whole 60 s, and was then gone (or, by luck, a zombie still readable) when read.
    probe = subprocess.run(
        ["bash", "-c", "setsid sleep 60 >/dev/null 2>&1 & echo $!"],
        check=True,
        capture_output=True,
        text=True,
    )
    sleeper = int(probe.stdout)
    assert _sigint_ignored(sleeper)
    os.kill(sleeper, signal.SIGKILL)
    subprocess.run(["bash", "-c", script], check=True, env=env, timeout=30)
    harness = int(pidfile.read_text())
    try:
        assert "harness.cli" in _cmdline_once_execed(harness)
        record = _wait_ready(out, harness, tmp_path)
        group = group_and_descendants(record["pid"], record["pid"])
        assert record["pid"] in group and len(group) >= 2
        os.kill(harness, signal.SIGINT)
        assert _wait_gone({harness}, 120) == set(), err.read_text()[-2000:]
        assert _wait_gone(group, 120) == set()
        assert port_is_free("127.0.0.1", port)
        assert "stopping (_Shutdown SIGINT)" in err.read_text()
        assert "stopped_at" in json.loads((tmp_path / "launch.json").read_text())
    finally:
        for pid in {harness} | group_and_descendants(harness, harness):
            if _alive(pid):
                os.kill(pid, signal.SIGTERM)


def test_sigkilled_launch_leaves_no_server(cpu_build, tmp_path: Path) -> None:
    port = free_port()
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    with open(out, "w") as stdout, open(err, "w") as stderr:
        proc = subprocess.Popen(
            _launch_argv(port, tmp_path),
            stdout=stdout,
            stderr=stderr,
            env=env,
            start_new_session=True,
        )
    group: set[int] = set()
    try:
        record = _wait_ready(out, proc.pid, tmp_path)
        group = group_and_descendants(record["pid"], record["pid"])
        assert len(group) >= 2
        proc.kill()  # SIGKILL: no handler, no atexit, no finally
        proc.wait()
        # the watchdog: SIGTERM to the group, SIGKILL after the stop timeout (15 s on CPU)
        assert _wait_gone(group, 120) == set()
        assert port_is_free("127.0.0.1", port)
    finally:
        for pid in group:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
