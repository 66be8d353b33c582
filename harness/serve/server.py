"""The vLLM server: a pinned build of a profile, launched and owned by the harness.

Its life (own process group, readiness, teardown, the atexit stop, the watchdog) is
`harness.serve.lifecycle.OwnedServer`'s; this module supplies vLLM's launch (the build, the
model, the serve command and its environment), its device check and its provenance, plus
`repro launch` (`serve_until_signalled`).
"""

from __future__ import annotations

import datetime as dt
import glob
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness import env as harness_env
from harness.errors import ServerError
from harness.paths import cache_dir
from harness.serve.builds import BuildEnv, ensure_build, get_build, nvidia_gpu_count
from harness.serve.endpoints import live_facts
from harness.serve.lifecycle import (
    POLL_S,
    Launch,
    OwnedServer,
    free_port,
    group_and_descendants,
    port_is_free,
)
from harness.serve.profiles import Profile, load_profile, render_serve_command
from harness.serve.provenance import (
    host_facts,
    kv_capacity_lines,
    relevant_env,
)

__all__ = [
    "VllmServer",
    "free_port",
    "group_and_descendants",
    "host_facts",
    "port_is_free",
    "serve_until_signalled",
]

LOOPBACK = ("127.0.0.1", "localhost", "::1")
OFFLOAD_MMAP_GLOB = "/dev/shm/vllm_offload_*.mmap"


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


class VllmServer(OwnedServer):
    """A vLLM server the harness owns. Context manager: __enter__ starts, __exit__ stops."""

    what = "vLLM"
    workdir_tag = "vllm"

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
        super().__init__(
            profile, log_path=log_path, port=port, echo=echo, stop_timeouts=stop_timeouts
        )
        self.build = build
        self.model_path: str | None = None

    def _environment(self, workdir: Path) -> dict[str, str]:
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
                "TMPDIR": str(workdir),
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

    def check_devices(self) -> None:
        require_gpus(self.profile)

    def launch(self, workdir: Path) -> Launch:
        from harness.serve.tiny import resolve_model

        self.build = self.build or ensure_build(self.profile.build, echo=self.echo)
        self.model_path = resolve_model(self.profile.model, self.build.python)
        command = render_serve_command(
            self.profile,
            model_path=self.model_path,
            port=self.port,
            executable=str(self.build.vllm),
        )
        if self.profile.gpus > 0 and _uses_offloading(self.profile):
            remove_stale_offload_files(self.echo)
        return Launch(command=command, env=self._environment(workdir))

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
            "started_at": self.started_at,
            "ready_seconds": self.ready_seconds,
            "log_path": str(self.log_path),
        }
        try:
            log_text = self.log_path.read_text(errors="replace")
        except OSError:
            log_text = ""
        record["kv_capacity"] = kv_capacity_lines(log_text)
        record.update(live_facts(self.base_url, self.metrics_url) if self.alive() else {})
        return record


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
