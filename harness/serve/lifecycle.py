"""The life of a server process the harness owns, whatever the server is (docs/engines.md §4).

`OwnedServer` starts the engine's command in its own session/process group, logs it, waits for
real readiness (/health 200, then /v1/models listing the served name, then one warm-up chat
completion) and tears it down: SIGINT, then SIGTERM, then SIGKILL over the whole group (and any
descendant that left it), each with a timeout. An atexit hook stops every server this process
started, so a crash of the harness leaves no orphan behind; a watchdog per server
(harness/serve/lifeline.py) tears the group down if the harness is killed outright (SIGKILL).

An engine supplies only what differs, through public hooks: `launch(workdir)` returns its
`Launch` (command and environment), `check_devices()` refuses a machine it cannot run on, and
`provenance()` says what it ran. `what` names it in the log and in every error.
"""

from __future__ import annotations

import atexit
import datetime as dt
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

import requests

from harness import env as harness_env
from harness.errors import ServerError, ServerStartFailed
from harness.serve.endpoints import loopback_session
from harness.serve.lifeline import GroupGuard, guard_group
from harness.serve.profiles import Profile
from harness.serve.startup import failure_reason

POLL_S = 0.5
_LIVE: set[OwnedServer] = set()  # strong refs: a dropped server object must still be stopped


# ---------------------------------------------------------------------------------------------
# Processes


def _proc_stat(pid: int) -> tuple[int, int, str] | None:
    """(ppid, pgrp, state) from /proc, or None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), int(fields[2]), fields[0]


def group_and_descendants(pgid: int, root: int) -> set[int]:
    """Live (non-zombie) processes in group `pgid` or descended from `root`."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _proc_stat(int(entry))
            if stat and stat[2] != "Z":
                stats[int(entry)] = stat
    members = {pid for pid, (_, pgrp, _) in stats.items() if pgrp == pgid}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, _, _) in stats.items():
            if ppid == parent and pid not in members:
                members.add(pid)
                frontier.append(pid)
        if parent in stats:
            members.add(parent)
    return members


def _signal_all(pgid: int, pids: set[int], sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def port_is_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # as servers do: TIME_WAIT leftovers of a stopped server must not count as busy
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) != 0


_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_PICK = 10_000


def _ephemeral_low() -> int:
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default range starts here


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now, chosen below the kernel's ephemeral range.

    The picked port is released before the server binds it. A port from the ephemeral range
    (a bind to port 0) could meanwhile go to any process binding port 0, which is how vLLM
    picks its internal ports: a CI run lost a server start to exactly that ("Address already in
    use"). Below the range only another explicit pick of the same random port can take it."""
    low = _ephemeral_low()
    if low > _LOWEST_PICK + 1:
        pick = random.SystemRandom()
        for _ in range(200):
            port = pick.randrange(_LOWEST_PICK, low)
            if port_is_free(host, port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


# ---------------------------------------------------------------------------------------------
# Servers


@dataclass(frozen=True)
class Launch:
    """One start of a server as its engine describes it: what to run, in which environment."""

    command: list[str]
    env: dict[str, str]


class OwnedServer(ABC):
    """A server process the harness owns. Context manager: __enter__ starts, __exit__ stops.

    Subclasses set `what` (its name in the log and errors, e.g. "vLLM") and `workdir_tag` (its
    temporary directory's prefix) and implement `launch` and `provenance`; `check_devices` is
    the machine check before anything is built or spawned (default: none). The profile gives
    the host, the default port, the served name and the readiness timeout."""

    what: ClassVar[str]
    workdir_tag: ClassVar[str]

    def __init__(
        self,
        profile: Profile,
        *,
        log_path: Path,
        port: int | None = None,
        echo: Callable[[str], None] | None = None,
        stop_timeouts: tuple[float, float, float] | None = None,
    ):
        self.profile = profile
        self.log_path = Path(log_path)
        self.port = port if port is not None else profile.port
        self.echo = echo or (lambda _msg: None)
        # Long drains for GPU profiles: unpinning a multi-100-GiB host pool takes a while.
        # REPRO_STOP_TIMEOUTS="sigint,sigterm,sigkill" seconds overrides the defaults.
        env_timeouts = harness_env.text("REPRO_STOP_TIMEOUTS")
        default = (60.0, 60.0, 30.0) if profile.gpus > 0 else (20.0, 15.0, 10.0)
        self.stop_timeouts = stop_timeouts or (
            tuple(float(x) for x in env_timeouts.split(",")) if env_timeouts else default
        )
        if len(self.stop_timeouts) != 3:
            raise ServerError(f"REPRO_STOP_TIMEOUTS={env_timeouts!r}: expected three numbers")
        self.served_model_name = profile.served_model_name
        self.command: list[str] = []
        self.env: dict[str, str] = {}
        self._proc: subprocess.Popen[bytes] | None = None
        self._guard: GroupGuard | None = None
        self._log_handle: Any = None
        self._workdir: Path | None = None
        self._started_at: str | None = None
        self._ready_seconds: float | None = None
        self._lock = threading.Lock()

    # -- the engine's part --------------------------------------------------------------------
    def check_devices(self) -> None:
        """Refuse a machine the server cannot run on (after the port check, before `launch`)."""

    @abstractmethod
    def launch(self, workdir: Path) -> Launch:
        """The command and environment of this start; `workdir` is a fresh temporary directory
        (the process's working directory, removed at stop). May build what it needs first."""

    @abstractmethod
    def provenance(self) -> dict[str, Any]:
        """What the manifest records about the running server."""

    # -- addresses ----------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        host = self.profile.host
        host = "127.0.0.1" if host in ("0.0.0.0", "") else host
        return f"http://{'[' + host + ']' if ':' in host else host}:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"{self.base_url}/metrics"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- start --------------------------------------------------------------------------------
    def start(self) -> Self:
        if self._proc is not None and self._proc.poll() is None:
            return self
        profile = self.profile
        if not port_is_free(profile.host, self.port):
            raise ServerError(
                f"port {self.port} on {profile.host} is busy; pick another with "
                f"--port, or stop what is listening there"
            )
        self.check_devices()
        try:
            self._workdir = Path(tempfile.mkdtemp(prefix=f"repro-{self.workdir_tag}-{self.port}-"))
            launch = self.launch(self._workdir)
            self.command, self.env = list(launch.command), dict(launch.env)
            self._spawn()
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self) -> None:
        """Start `self.command` in its own session, logging to `self.log_path`, under the
        watchdog that stops its group if the harness dies (even by SIGKILL)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_handle = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._log_handle.write(f"# repro: {shlex.join(self.command)}\n".encode())
        self._log_handle.flush()
        self._started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        self._proc = subprocess.Popen(
            self.command,
            stdout=self._log_handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
            cwd=self._workdir,
            start_new_session=True,
        )
        _LIVE.add(self)
        self._guard = guard_group(self._proc.pid, grace_s=self.stop_timeouts[1])
        self.echo(f"{self.what} pid {self._proc.pid} on {self.base_url}; log {self.log_path}")

    def _died(self, when: str) -> ServerError:
        code = self._proc.poll() if self._proc else None
        tail = self.log_tail()
        if when != "during start-up":
            return ServerError(
                f"{self.what} ({self.profile.name}) exited with code {code} {when}; "
                f"log {self.log_path}, last lines:\n{tail}"
            )
        reason = failure_reason(self.log_tail(400))
        because = f": {reason}" if reason else ""
        return ServerStartFailed(
            f"{self.what} ({self.profile.name}) exited with code {code} {when}{because}; "
            f"log {self.log_path}, last lines:\n{tail}",
            server_exit_code=code,
            reason=reason,
        )

    def _wait_ready(self) -> None:
        assert self._proc is not None
        t0 = time.monotonic()
        deadline = t0 + self.profile.ready_timeout_s
        http = loopback_session()
        stage = "health"
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise self._died("during start-up")
            try:
                if (
                    stage == "health"
                    and http.get(f"{self.base_url}/health", timeout=2).status_code == 200
                ):
                    stage = "models"
                if stage == "models":
                    models = http.get(f"{self.base_url}/v1/models", timeout=5).json()
                    ids = [m.get("id") for m in models.get("data", [])]
                    if self.served_model_name not in ids:
                        raise ServerError(
                            f"/v1/models lists {ids}, not the served name "
                            f"{self.served_model_name!r}"
                        )
                    stage = "warmup"
                if stage == "warmup":
                    self._warm_up(http, deadline)
                    self._ready_seconds = round(time.monotonic() - t0, 1)
                    self.echo(f"ready in {self._ready_seconds} s")
                    return
            except requests.RequestException:
                pass
            time.sleep(POLL_S)
        raise ServerError(
            f"{self.what} ({self.profile.name}) not ready after "
            f"{self.profile.ready_timeout_s:.0f} s (stage {stage}); log "
            f"{self.log_path}, last lines:\n{self.log_tail()}"
        )

    def _warm_up(self, http: requests.Session, deadline: float) -> None:
        body = {
            "model": self.served_model_name,
            "max_tokens": 4,
            "ignore_eos": True,
            "temperature": 0,
            "messages": [{"role": "user", "content": "Hello"}],
        }
        response = http.post(
            f"{self.base_url}/v1/chat/completions",
            json=body,
            timeout=max(5.0, deadline - time.monotonic()),
        )
        if response.status_code != 200:
            raise ServerError(
                f"warm-up completion failed: HTTP {response.status_code} "
                f"{response.text[:300]}; log {self.log_path}"
            )

    # -- state --------------------------------------------------------------------------------
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def check(self) -> None:
        """Raise ServerError with the log tail if the server is no longer running."""
        if self._proc is not None and self._proc.poll() is not None:
            raise self._died("while serving")
        if self._proc is None:
            raise ServerError(
                f"{self.what} ({self.profile.name}) is not running; log {self.log_path}"
            )

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    @property
    def started_at(self) -> str | None:
        """When the process was spawned (UTC, ISO seconds)."""
        return self._started_at

    @property
    def ready_seconds(self) -> float | None:
        """Seconds from spawn to ready (None until ready)."""
        return self._ready_seconds

    # -- stop ---------------------------------------------------------------------------------
    def stop(self) -> None:
        with self._lock:
            proc, self._proc = self._proc, None
            if proc is not None:
                self._terminate(proc)
            if self._guard is not None:
                self._guard.release()
                self._guard = None
            if self._log_handle is not None:
                self._log_handle.close()
                self._log_handle = None
            if self._workdir is not None:
                shutil.rmtree(self._workdir, ignore_errors=True)
                self._workdir = None
            _LIVE.discard(self)

    def _terminate(self, proc: subprocess.Popen[bytes]) -> None:
        pgid = proc.pid  # start_new_session: the leader's pid is the group id
        for sig, timeout in zip(
            (signal.SIGINT, signal.SIGTERM, signal.SIGKILL), self.stop_timeouts, strict=True
        ):
            members = group_and_descendants(pgid, proc.pid)
            if not members and proc.poll() is not None:
                break
            _signal_all(pgid, members, sig)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                try:
                    proc.wait(timeout=POLL_S)
                except subprocess.TimeoutExpired:
                    pass
                if proc.poll() is not None and not group_and_descendants(pgid, proc.pid):
                    break
            else:
                self.echo(f"{self.what} group {pgid} still alive after {sig.name}")
                continue
            break
        left = group_and_descendants(pgid, proc.pid)
        if left:
            raise ServerError(
                f"processes {sorted(left)} of {self.what} group {pgid} survived SIGKILL"
            )

    def restart(self) -> None:
        self.stop()
        self.start()


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        try:
            server.stop()
        except Exception as exc:  # noqa: BLE001 - best effort at interpreter exit
            print(f"repro: stopping {server.what} at exit failed: {exc}", file=sys.stderr)
