"""The group watchdog: a child in its own session must not outlive a SIGKILLed harness."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HARNESS = """
import subprocess, sys, time
from harness.serve.lifeline import guard_group
child = subprocess.Popen(["sleep", "300"], start_new_session=True)
guard = guard_group(child.pid, grace_s=2.0)
print(child.pid, guard.pid, flush=True)
if sys.argv[1] == "stop":
    child.terminate(); child.wait(); guard.release(); print("released", flush=True)
time.sleep(300)
"""


# How long to wait for processes to go: an upper bound for a hang, not a speed verdict (a loaded
# machine is slow to reap; what is checked is that they go).
GONE_WITHIN_S = 120.0


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def _start(mode: str) -> tuple[subprocess.Popen, int, int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HARNESS, mode],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    child, guard = (int(x) for x in proc.stdout.readline().split())
    return proc, child, guard


def test_sigkilled_harness_takes_its_session_child_with_it() -> None:
    proc, child, guard = _start("wait")
    try:
        assert _alive(child) and _alive(guard)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert _wait_gone([child, guard], GONE_WITHIN_S) == []
    finally:
        for pid in (child, guard):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_released_guard_exits_and_leaves_nothing() -> None:
    proc, child, guard = _start("stop")
    try:
        assert proc.stdout.readline().strip() == "released"
        assert _wait_gone([child, guard], GONE_WITHIN_S) == []
    finally:
        proc.kill()
        proc.wait()


def test_evalscope_child_does_not_outlive_a_sigkilled_harness(tmp_path: Path) -> None:
    log = tmp_path / "client.log"
    script = (
        "from pathlib import Path\n"
        "from harness.client.evalscope import run_child\n"
        f"run_child(['sh', '-c', 'echo $$; exec sleep 300'], log_path=Path({str(log)!r}),"
        " timeout_s=600)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": os.getcwd()}
    )
    child = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (log.exists() and log.read_text().strip()):
            time.sleep(0.1)
        child = int(log.read_text().split()[0])
        assert _alive(child)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert _wait_gone([child], GONE_WITHIN_S) == []
    finally:
        if child and _alive(child):
            os.kill(child, signal.SIGKILL)
