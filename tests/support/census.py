"""Counts the servers a test session starts, by watching /proc.

Server starts are the suite's largest cost (tens of seconds each on 2 cores), and they happen in
this process, in `repro` subprocesses and inside Slurm jobs alike, so they are counted where all
of them are visible: new processes whose command line is a vLLM or simulated-engine server.
A start lasts far longer than the scan interval, so none is missed.
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

SCAN_INTERVAL_S = 0.5


def server_kind(argv: list[str]) -> str | None:
    """'vllm' or 'sim' for a server's command line, else None."""
    for i, arg in enumerate(argv[:-1]):
        if arg.endswith("/bin/vllm") and argv[i + 1] == "serve":
            return "vllm"
        if arg == "sim" and argv[i + 1] == "serve":
            return "sim"
    return None


def _argv(pid_dir: Path) -> list[str] | None:
    try:
        raw = (pid_dir / "cmdline").read_bytes()
    except OSError:
        return None
    return raw.rstrip(b"\0").decode(errors="replace").split("\0") if raw else None


class ServerCensus:
    """A daemon thread that records each server process once, by pid and start time."""

    def __init__(self) -> None:
        self.starts: Counter[str] = Counter()
        self._seen: set[tuple[str, str]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="server-census", daemon=True)

    def start(self) -> None:
        self._scan(count=False)  # servers already running were not started by this session
        self._thread.start()

    def stop(self) -> Counter[str]:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(timeout=5)
            self._scan(count=True)
        return self.starts

    def _run(self) -> None:
        while not self._stop.wait(SCAN_INTERVAL_S):
            self._scan(count=True)

    def _scan(self, *, count: bool) -> None:
        for pid_dir in Path("/proc").iterdir():
            if not pid_dir.name.isdigit():
                continue
            argv = _argv(pid_dir)  # empty mid-execve: looked at again on the next scan
            if not argv:
                continue
            kind = server_kind(argv)
            if kind is None:
                continue
            try:
                fields = (pid_dir / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parent = _argv(Path("/proc") / fields[1])
            if parent and server_kind(parent) == kind:
                continue  # a forked worker of a server, not a new server
            key = (pid_dir.name, fields[19])
            if key not in self._seen:
                self._seen.add(key)
                if count:
                    self.starts[kind] += 1
