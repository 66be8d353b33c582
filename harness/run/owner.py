"""Who is running a run: the harness process that owns it, and the server group it started.

A manifest that says `running` is only true while its owner lives. The owner is identified by
(host, pid, process start time) so a recycled pid is not mistaken for it.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from typing import Any, Literal

OwnerState = Literal["alive", "dead", "elsewhere", "unknown"]


def _start_ticks(pid: int) -> int | None:
    """The process start time in clock ticks since boot (/proc/PID/stat field 22)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            stat = handle.read()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after the last ')'
    return int(stat.rsplit(")", 1)[1].split()[19])


def this_owner() -> dict[str, Any]:
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "start_ticks": _start_ticks(pid)}


def owner_state(owner: dict[str, Any] | None) -> OwnerState:
    if not owner or "pid" not in owner:
        return "unknown"
    if owner.get("host") != socket.gethostname():
        return "elsewhere"
    ticks = _start_ticks(int(owner["pid"]))
    if ticks is None or (owner.get("start_ticks") is not None and ticks != owner["start_ticks"]):
        return "dead"
    return "alive"


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_orphaned_group(pgid: int, *, grace_s: float = 15.0) -> bool:
    """SIGTERM, then SIGKILL, the process group a dead owner left; True if it is gone."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not group_alive(pgid):
                return True
            time.sleep(0.2)
    return not group_alive(pgid)
