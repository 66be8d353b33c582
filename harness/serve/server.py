"""The vLLM server lifecycle: start in its own process group, wait for real readiness, tear down.

Readiness is /health 200, then /v1/models listing the served name, then one warm-up chat
completion. Teardown signals the whole process group (and any descendant that left it):
SIGINT, then SIGTERM, then SIGKILL, each with a timeout. An atexit hook stops every server this
process started, so a crash of the harness leaves no orphan behind; a watchdog per server
(harness/serve/lifeline.py) tears the group down if the harness is killed outright (SIGKILL).
"""

from __future__ import annotations

import atexit
import datetime as dt
import glob
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Self

import requests

from harness import env as harness_env
from harness.errors import ServerError, ServerStartFailed
from harness.paths import cache_dir
from harness.serve.builds import BuildEnv, ensure_build, get_build, nvidia_gpu_count
from harness.serve.endpoints import live_facts, loopback_session
from harness.serve.lifeline import GroupGuard, guard_group
from harness.serve.profiles import Profile, load_profile, render_serve_command
from harness.serve.provenance import (
    host_facts,
    kv_capacity_lines,
    relevant_env,
)
from harness.serve.startup import failure_reason

__all__ = ["VllmServer", "host_facts", "serve_until_signalled"]

POLL_S = 0.5
LOOPBACK = ("127.0.0.1", "localhost", "::1")
OFFLOAD_MMAP_GLOB = "/dev/shm/vllm_offload_*.mmap"
_LIVE: set[VllmServer] = set()  # strong refs: a dropped server object must still be stopped


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


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _open_by_any_process(path: str) -> bool:
    for fd_dir in glob.glob("/proc/[0-9]*/fd"):
        try:
            for fd in os.listdir(fd_dir):
                if os.readlink(f"{fd_dir}/{fd}") == path:
                    return True
        except OSError:
            continue
    return False


def remove_stale_offload_files(echo: Callable[[str], None] = print) -> list[str]:
    """OffloadingConnector mmap files that survived a SIGKILL (no process has them open)."""
    removed = []
    for path in glob.glob(OFFLOAD_MMAP_GLOB):
        if not _open_by_any_process(path):
            Path(path).unlink(missing_ok=True)
            removed.append(path)
            echo(f"removed stale {path}")
    return removed


def _uses_offloading(profile: Profile) -> bool:
    return (
        "OffloadingConnector" in str(profile.serve.get("kv-transfer-config", ""))
        or "kv-offloading-size" in profile.serve
    )


# ---------------------------------------------------------------------------------------------
# Servers


def require_gpus(profile: Profile) -> None:
    """The profile's GPUs are on this machine, or an error that says where to run instead."""
    if profile.gpus <= 0:
        return
    have = nvidia_gpu_count()
    if have < profile.gpus:
        raise ServerError(
            f"profile {profile.name} needs {profile.gpus} NVIDIA GPU(s); this machine has "
            f"{have}. Run the server where the GPUs are and attach to it with "
            f"--url http://HOST:PORT (e.g. `repro sweep --profile {profile.name} "
            f"--url http://gpu-node:8000`)"
        )


class VllmServer:
    """A vLLM server the harness owns. Context manager: __enter__ starts, __exit__ stops."""

    def __init__(
        self,
        profile: Profile,
        *,
        log_path: Path,
        port: int | None = None,
        build: BuildEnv | None = None,
        echo: Callable[[str], None] | None = None,
        stop_timeouts: tuple[float, float, float] | None = None,
    ):
        self.profile = profile
        self.log_path = Path(log_path)
        self.port = port if port is not None else profile.port
        self.build = build
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
        self.model_path: str | None = None
        self.env: dict[str, str] = {}
        self._proc: subprocess.Popen[bytes] | None = None
        self._guard: GroupGuard | None = None
        self._log_handle: Any = None
        self._tmpdir: Path | None = None
        self._started_at: str | None = None
        self._ready_seconds: float | None = None
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        host = self.profile.host
        host = "127.0.0.1" if host in ("0.0.0.0", "") else host
        return f"http://{'[' + host + ']' if ':' in host else host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- start ------------------------------------------------------------------------------
    def _environment(self) -> dict[str, str]:
        env = harness_env.for_child()
        no_proxy = ",".join(filter(None, [env.get("NO_PROXY") or env.get("no_proxy"), *LOOPBACK]))
        compile_root = cache_dir() / "compile" / self.profile.build
        cpu_build = get_build(self.profile.build).device == "cpu"
        if cpu_build or Path(self.model_path or "").exists():
            # local models never need the hub; a GPU profile naming a hub id may need to download
            env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
        env.update(
            {
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
                "VLLM_HOST_IP": "127.0.0.1"
                if self.profile.host in LOOPBACK
                else env.get("VLLM_HOST_IP", ""),
                "VLLM_CACHE_ROOT": str(compile_root / "vllm"),
                "TORCHINDUCTOR_CACHE_DIR": str(compile_root / "inductor"),
                "TMPDIR": str(self._tmpdir),
                "NO_PROXY": no_proxy,
                "no_proxy": no_proxy,
                "PYTHONUNBUFFERED": "1",
            }
        )
        if not env["VLLM_HOST_IP"]:
            env.pop("VLLM_HOST_IP")
        if cpu_build:
            env["VLLM_TARGET_DEVICE"] = "cpu"
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        env.update(self.profile.env)
        return env

    def start(self) -> Self:
        if self._proc is not None and self._proc.poll() is None:
            return self
        profile = self.profile
        if not port_is_free(profile.host, self.port):
            raise ServerError(
                f"port {self.port} on {profile.host} is busy; pick another with "
                f"--port, or stop what is listening there"
            )
        self._check_devices()
        try:
            self._launch()
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _check_devices(self) -> None:
        require_gpus(self.profile)

    def _launch(self) -> None:
        from harness.serve.tiny import resolve_model

        self.build = self.build or ensure_build(self.profile.build, echo=self.echo)
        self.model_path = resolve_model(self.profile.model, self.build.python)
        self.command = render_serve_command(
            self.profile,
            model_path=self.model_path,
            port=self.port,
            executable=str(self.build.vllm),
        )
        if self.profile.gpus > 0 and _uses_offloading(self.profile):
            remove_stale_offload_files(self.echo)
        self._tmpdir = Path(tempfile.mkdtemp(prefix=f"repro-vllm-{self.port}-"))
        self.env = self._environment()
        self._spawn("vLLM")

    def _spawn(self, what: str) -> None:
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
            cwd=self._tmpdir,
            start_new_session=True,
        )
        _LIVE.add(self)
        self._guard = guard_group(self._proc.pid, grace_s=self.stop_timeouts[1])
        self.echo(f"{what} pid {self._proc.pid} on {self.base_url}; log {self.log_path}")

    def _died(self, when: str) -> ServerError:
        code = self._proc.poll() if self._proc else None
        tail = self.log_tail()
        if when != "during start-up":
            return ServerError(
                f"vLLM ({self.profile.name}) exited with code {code} {when}; "
                f"log {self.log_path}, last lines:\n{tail}"
            )
        reason = failure_reason(self.log_tail(400))
        because = f": {reason}" if reason else ""
        return ServerStartFailed(
            f"vLLM ({self.profile.name}) exited with code {code} {when}{because}; "
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
            f"vLLM ({self.profile.name}) not ready after "
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

    # -- state ------------------------------------------------------------------------------
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def check(self) -> None:
        """Raise ServerError with the log tail if the server is no longer running."""
        if self._proc is not None and self._proc.poll() is not None:
            raise self._died("while serving")
        if self._proc is None:
            raise ServerError(f"vLLM ({self.profile.name}) is not running; log {self.log_path}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def provenance(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "engine": "vllm",
            "profile": self.profile.model_dump(mode="json"),
            "build": self.build.provenance if self.build else None,
            "command": list(self.command),
            "command_line": shlex.join(self.command),
            "model_path": self.model_path,
            "base_url": self.base_url,
            "served_model_name": self.served_model_name,
            "pid": self.pid,
            "env": relevant_env(self.env),
            "host": host_facts(),
            "started_at": self._started_at,
            "ready_seconds": self._ready_seconds,
            "log_path": str(self.log_path),
        }
        try:
            log_text = self.log_path.read_text(errors="replace")
        except OSError:
            log_text = ""
        record["kv_capacity"] = kv_capacity_lines(log_text)
        record.update(live_facts(self.base_url) if self.alive() else {})
        return record

    # -- stop -------------------------------------------------------------------------------
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
            if self._tmpdir is not None:
                shutil.rmtree(self._tmpdir, ignore_errors=True)
                self._tmpdir = None
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
                self.echo(f"vLLM group {pgid} still alive after {sig.name}")
                continue
            break
        left = group_and_descendants(pgid, proc.pid)
        if left:
            raise ServerError(f"processes {sorted(left)} of vLLM group {pgid} survived SIGKILL")

    def restart(self) -> None:
        self.stop()
        self.start()


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        try:
            server.stop()
        except Exception as exc:  # noqa: BLE001 - best effort at interpreter exit
            print(f"repro: stopping vLLM at exit failed: {exc}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# `repro launch`


class _Shutdown(Exception):
    pass


def _raise_shutdown(signum: int, _frame: Any) -> None:
    raise _Shutdown(signal.Signals(signum).name)


def serve_until_signalled(
    profile_name: str,
    *,
    port: int | None = None,
    overrides: Sequence[str] = (),
    log_dir: Path | None = None,
    echo: Callable[[str], None] | None = None,
) -> None:
    """Start, print `ready <base-url>` (flushed), serve until Ctrl-C/SIGTERM, then tear down."""
    from harness.results import atomic_write_json

    profile = load_profile(profile_name, overrides)
    if log_dir is None:
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        log_dir = cache_dir() / "launches" / f"{profile.name}-{stamp}-{os.getpid()}"
    log_dir.mkdir(parents=True, exist_ok=True)
    record_path = log_dir / "launch.json"

    def status(msg: str) -> None:  # progress goes to stderr: stdout carries only `ready <url>`
        print(msg, file=sys.stderr, flush=True)

    previous = {
        sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    # SIGINT explicitly too: a script's background job (`repro launch ... &`) starts with SIGINT
    # ignored, and Python then installs no KeyboardInterrupt handler of its own.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_shutdown)
    server = VllmServer(profile, log_path=log_dir / "server.log", port=port, echo=status)
    record: dict[str, Any] = {}
    try:
        server.start()
        record = server.provenance()
        atomic_write_json(record_path, record)
        sys.stdout.write(f"ready {server.base_url}\n")
        sys.stdout.flush()
        status(f"serving {profile.name}; launch record {record_path}; Ctrl-C or SIGTERM stops")
        while server.alive():
            time.sleep(POLL_S)
        server.check()
    except (KeyboardInterrupt, _Shutdown) as exc:
        status(f"stopping ({type(exc).__name__} {exc})")
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # a second signal must not cut teardown short
        try:
            server.stop()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if record:
                record["stopped_at"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
                atomic_write_json(record_path, record)
    status("stopped")
