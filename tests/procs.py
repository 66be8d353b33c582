"""Process facts for lifecycle tests, read from /proc (Linux)."""

from __future__ import annotations

import os
from pathlib import Path


def children(parent: int) -> dict[int, tuple[int, str]]:
    """pid -> (process group, command line) of the direct children of `parent`."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
                found[int(entry.name)] = (os.getpgid(int(entry.name)), cmd)
        except (OSError, ValueError):
            continue
    return found


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
