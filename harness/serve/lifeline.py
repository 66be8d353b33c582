"""Children that must not outlive the harness (the vLLM server, the EvalScope client).

Both run in their own session/process group (so teardown can signal the whole group, and a
terminal Ctrl-C reaches the harness first), which also means nothing kills them if the harness
itself is SIGKILLed. `guard_group` starts a tiny watchdog (harness/serve/watchdog.py) that does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

WATCHDOG = Path(__file__).with_name("watchdog.py")


class GroupGuard:
    """The watchdog of one process group; `release()` once the group has been torn down."""

    def __init__(self, pgid: int, grace_s: float = 20.0):
        self.pgid = pgid
        self._proc = subprocess.Popen(
            [sys.executable, "-S", str(WATCHDOG), str(os.getpid()), str(pgid), str(grace_s)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # survives a Ctrl-C to the harness's group
            close_fds=True,
        )

    @property
    def pid(self) -> int:
        return self._proc.pid

    def release(self, timeout_s: float = 2.0) -> None:
        """Stop watching: the caller has torn the group down (or leaves what remains alone)."""
        if self._proc.poll() is None:
            try:
                os.killpg(self.pgid, 0)
                gone = False
            except ProcessLookupError:
                gone = True
            except PermissionError:
                gone = False
            if not gone:
                self._proc.kill()
        try:
            self._proc.wait(timeout=timeout_s)  # it exits by itself once the group is gone
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def guard_group(pgid: int, grace_s: float = 20.0) -> GroupGuard:
    return GroupGuard(pgid, grace_s)
