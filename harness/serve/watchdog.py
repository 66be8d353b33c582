"""Process-group watchdog: `python -S watchdog.py PARENT_PID PGID GRACE_S`.

Started by the harness next to a child it runs in its own session (the vLLM server, the
EvalScope client). If the harness dies, even by SIGKILL, it tears the child's group down:
SIGTERM, then SIGKILL after GRACE_S. It learns of the death from PR_SET_PDEATHSIG (immediate) and
from its parent pid changing (polled, in case the signal was for an exiting thread of a living
parent). It exits by itself once the group is gone. Standard library only; no harness imports.
"""

import ctypes
import os
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
POLL_S = 0.25


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def teardown(pgid: int, grace_s: float) -> None:
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and group_alive(pgid):
            time.sleep(POLL_S)
        if not group_alive(pgid):
            return


def main() -> None:
    parent, pgid, grace_s = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal Ctrl-C is the harness's to handle
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: None)  # wakes the sleep; the ppid check decides
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: polling alone
    while group_alive(pgid):
        if os.getppid() != parent:
            teardown(pgid, grace_s)
            return
        time.sleep(POLL_S)


if __name__ == "__main__":
    main()
