"""`repro doctor`: is this machine ready for a profile, before a 20-minute model load says no.

`preflight(profile, url=..., port=...)` returns ok/warn/fail/skip `Check`s, each failing one with
its remedy; `raise_on_failures(checks)` turns failures into one error, one line per check. The
facts come from nvidia-smi, /proc/meminfo, statvfs, the build cache, a socket bind and (unless
HF_HUB_OFFLINE=1) a short HEAD to the hub.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import env as harness_env
from harness.errors import ConfigError
from harness.paths import cache_dir
from harness.serve.builds import _installed, get_build
from harness.serve.checks import Check, Status, raise_on_failures
from harness.serve.profiles import Profile
from harness.serve.server import OFFLOAD_MMAP_GLOB, _open_by_any_process, port_is_free

__all__ = [
    "Check",
    "Gpu",
    "HostPools",
    "host_pools",
    "preflight",
    "raise_on_failures",
    "require_ready",
]

GIB = float(1 << 30)
HISPARSE_RAM_FRACTION = 0.95  # vLLM refuses a HiSparse pool above 95 % of available RAM
MIN_COMPUTE_CAPABILITY = 9.0  # HiSparse kernels: SM >= 9.0 (Hopper)
HUB_TIMEOUT_S = 5.0
# Weights on disk (docs/vllm.md §6.2: 19.556 GiB shared + 684.167 GiB routed experts).
KNOWN_MODEL_GIB = {"zai-org/GLM-5.3": 704.0}
CUDA_BUILD_GIB = 15.0  # a CUDA vLLM venv with torch


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    compute_capability: float
    driver: str
    memory_total_mib: float
    memory_free_mib: float
    persistence: str
    app_clock_mhz: float = 0.0  # application (locked) graphics clock; 0 = not reported
    max_clock_mhz: float = 0.0


@dataclass(frozen=True)
class HostPools:
    """Pinned host memory a profile asks vLLM for, in GiB."""

    hisparse_per_replica_gib: float
    replicas: int
    offload_gib: float

    @property
    def hisparse_gib(self) -> float:
        return self.hisparse_per_replica_gib * self.replicas

    @property
    def total_gib(self) -> float:
        return self.hisparse_gib + self.offload_gib


# --------------------------------------------------------------------------- profile facts


def _connectors(kv: Any) -> list[dict]:
    if not isinstance(kv, dict):
        return []
    extra = kv.get("kv_connector_extra_config") or {}
    inner = extra.get("connectors") if kv.get("kv_connector") == "MultiConnector" else None
    return [kv] + [c for entry in inner or [] for c in _connectors(entry)]


def host_pools(profile: Profile) -> HostPools:
    serve = profile.serve
    hisparse = 0.0
    fork = ((serve.get("attention-config") or {}).get("hisparse_config") or {}).get("host_pool_gib")
    if fork:
        hisparse += float(fork)
    offload = float(serve.get("kv-offloading-size") or 0.0)
    for conn in _connectors(serve.get("kv-transfer-config")):
        extra = conn.get("kv_connector_extra_config") or {}
        if conn.get("kv_connector") == "HiSparseConnector":
            hisparse += float(extra.get("host_pool_gib") or 0.0)
        elif conn.get("kv_connector") == "OffloadingConnector":
            offload += float(extra.get("cpu_bytes_to_use") or 0.0) / GIB
    return HostPools(hisparse, int(serve.get("data-parallel-size") or 1), offload)


def uses_hisparse(profile: Profile) -> bool:
    return host_pools(profile).hisparse_per_replica_gib > 0


# --------------------------------------------------------------------------- machine facts


def query_gpus(run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> list[Gpu]:
    """NVIDIA GPUs from nvidia-smi; [] when there is no nvidia-smi or it fails."""
    if not shutil.which("nvidia-smi"):
        return []
    fields = (
        "index,name,compute_cap,driver_version,memory.total,memory.free,persistence_mode,"
        "clocks.applications.graphics,clocks.max.graphics"
    )
    proc = run(
        ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if proc.returncode != 0:
        return []
    gpus = []
    for line in proc.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 9:
            continue
        gpus.append(
            Gpu(int(parts[0]), parts[1], _float(parts[2]), parts[3], _float(parts[4]),
                _float(parts[5]), parts[6], _float(parts[7]), _float(parts[8]))
        )  # fmt: skip
    return gpus


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0


def mem_available_gib(meminfo: Path = Path("/proc/meminfo")) -> float:
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024 / GIB
    raise ConfigError(f"{meminfo}: no MemAvailable line")


def free_gib(path: Path) -> float:
    while not path.exists() and path != path.parent:
        path = path.parent
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize / GIB


def hub_cache_dir() -> Path:
    return harness_env.hf_hub_cache()


# --------------------------------------------------------------------------- checks


def gpu_checks(profile: Profile, gpus: list[Gpu]) -> list[Check]:
    need = profile.gpus
    if need == 0:
        return [Check("gpus", "ok", "profile needs no GPU")]
    if not gpus:
        return [
            Check(
                "gpus",
                "fail",
                f"profile {profile.name} needs {need} NVIDIA GPU(s); nvidia-smi finds none",
                "run on the GPU node, or start the server there and pass --url http://HOST:PORT",
            )
        ]
    models = sorted({g.name for g in gpus})
    checks = [
        Check(
            "gpus",
            "ok" if len(gpus) >= need else "fail",
            f"{len(gpus)} GPU(s) ({', '.join(models)}), profile needs {need}",
            f"use a node with {need} GPUs or lower tensor-parallel-size",
        ),
        Check("driver", "ok", f"driver {gpus[0].driver}, {_cuda_version()}"),
    ]
    if uses_hisparse(profile):
        low = [g for g in gpus if g.compute_capability < MIN_COMPUTE_CAPABILITY]
        checks.append(
            Check(
                "compute-capability",
                "fail" if low else "ok",
                f"HiSparse needs SM >= {MIN_COMPUTE_CAPABILITY}; "
                + (f"GPU(s) {[g.index for g in low]} below" if low else "all GPUs qualify"),
                "HiSparse runs on Hopper (H100/H200) or newer only",
            )
        )
    off = [g.index for g in gpus if g.persistence.lower() != "enabled"]
    checks.append(
        Check(
            "persistence-mode",
            "warn" if off else "ok",
            f"persistence mode off on GPU(s) {off}" if off else "persistence mode on",
            "sudo nvidia-smi -pm 1 (steadier clocks and start-up between points)",
        )
    )
    slow = [g.index for g in gpus if 0 < g.app_clock_mhz < g.max_clock_mhz]
    checks.append(
        Check(
            "clocks",
            "warn" if slow else "ok",
            f"application clocks below max on GPU(s) {slow}" if slow else "clocks at max",
            "sudo nvidia-smi -rac (reset application clocks), or note the locked clocks",
        )
    )
    util = float(profile.serve.get("gpu-memory-utilization", 0.9))
    short = [g.index for g in gpus if g.memory_free_mib < util * g.memory_total_mib]
    checks.append(
        Check(
            "gpu-memory",
            "fail" if short else "ok",
            f"GPU(s) {short} have less free memory than gpu-memory-utilization {util} of total"
            if short
            else f"free GPU memory >= {util} of total on every GPU",
            "stop the other processes on those GPUs (nvidia-smi shows them)",
        )
    )
    return checks


def _cuda_version() -> str:
    if not shutil.which("nvidia-smi"):
        return "CUDA version unknown (no nvidia-smi)"
    proc = subprocess.run(["nvidia-smi"], capture_output=True, text=True, check=False, timeout=30)
    for part in proc.stdout.split("|"):
        if "CUDA Version" in part:
            return part.strip().split("CUDA Version:")[-1].strip().join(("CUDA ", ""))
    return "CUDA version unknown"


def memory_checks(profile: Profile, available_gib: float) -> list[Check]:
    pools = host_pools(profile)
    if pools.total_gib == 0:
        return [Check("host-ram", "ok", f"no pinned host pools; {available_gib:.1f} GiB available")]
    checks = []
    if pools.hisparse_gib:
        limit = HISPARSE_RAM_FRACTION * available_gib
        checks.append(
            Check(
                "hisparse-pool",
                "fail" if pools.hisparse_gib > limit else "ok",
                f"HiSparse pool {pools.hisparse_per_replica_gib:g} GiB x {pools.replicas} DP "
                f"replica(s) = {pools.hisparse_gib:g} GiB vs {limit:.1f} GiB "
                f"(95 % of {available_gib:.1f} GiB available; vLLM refuses above)",
                "free host RAM or lower host_pool_gib (it is per DP replica)",
            )
        )
    checks.append(
        Check(
            "host-ram",
            "fail" if pools.total_gib > available_gib else "ok",
            f"pinned pools {pools.total_gib:g} GiB (HiSparse {pools.hisparse_gib:g} + offloading "
            f"{pools.offload_gib:g}) vs {available_gib:.1f} GiB available",
            "run on a node with more free RAM, or shrink the pools (host_pool_gib, "
            "cpu_bytes_to_use)",
        )
    )
    return checks


def shm_checks(profile: Profile, shm: Path = Path("/dev/shm")) -> list[Check]:
    if not shm.exists():
        return [Check("dev-shm", "warn", f"{shm} missing", "mount a tmpfs at /dev/shm")]
    pools = host_pools(profile)
    free = free_gib(shm)
    detail = f"{free:.1f} GiB free in {shm}"
    if pools.offload_gib:
        detail += f"; the offloading pool ({pools.offload_gib:g} GiB) is an mmap there"
    checks = [
        Check(
            "dev-shm",
            "fail" if pools.offload_gib > free else "ok",
            detail,
            "enlarge /dev/shm (docker --shm-size, or mount -o remount,size=...)",
        )
    ]
    stale = [
        p
        for p in sorted(shm.glob(Path(OFFLOAD_MMAP_GLOB).name))
        if not _open_by_any_process(str(p))
    ]
    if stale:
        size = sum(p.stat().st_size for p in stale) / GIB
        checks.append(
            Check(
                "stale-offload-mmap",
                "warn",
                f"{len(stale)} stale vllm_offload_*.mmap ({size:.1f} GiB) in {shm}",
                f"rm {' '.join(str(p) for p in stale[:3])}{' ...' if len(stale) > 3 else ''} "
                "(repro removes them before starting an offloading server)",
            )
        )
    return checks


def disk_checks(profile: Profile) -> list[Check]:
    checks = []
    if profile.model.startswith("tiny:") or Path(profile.model).expanduser().exists():
        checks.append(Check("disk-weights", "ok", f"model {profile.model} is local"))
    else:
        hub = hub_cache_dir()
        cached = (hub / f"models--{profile.model.replace('/', '--')}").exists()
        need = 0.0 if cached else KNOWN_MODEL_GIB.get(profile.model, 0.0)
        free = free_gib(hub)
        status: Status = "fail" if need > free else ("ok" if cached or need else "warn")
        size = f"{need:g} GiB needed" if need else "size unknown"
        checks.append(
            Check(
                "disk-weights",
                status,
                f"{profile.model}: {'in the hub cache' if cached else size}; {free:.0f} GiB "
                f"free in {hub}",
                "point HF_HUB_CACHE at a larger disk, or pre-download the weights",
            )
        )
    build = get_build(profile.build)
    if _installed(profile.build) is None and build.device == "cuda":
        free = free_gib(cache_dir())
        checks.append(
            Check(
                "disk-builds",
                "fail" if free < CUDA_BUILD_GIB else "ok",
                f"{free:.0f} GiB free in {cache_dir()} for the build (~{CUDA_BUILD_GIB:g} GiB)",
                "set REPRO_CACHE to a larger disk",
            )
        )
    return checks


def build_check(profile: Profile, gpus: list[Gpu]) -> Check:
    build = get_build(profile.build)
    env = _installed(profile.build)
    if env is not None:
        version = env.provenance.get("vllm_version_output") or "?"
        return Check("build", "ok", f"{build.name} installed ({version})")
    if build.device == "cuda" and not gpus:
        return Check(
            "build",
            "fail",
            f"{build.name} is not installed and needs CUDA and an NVIDIA GPU to install",
            f"on the GPU node: repro build {build.name} (or --dry-run to see the steps)",
        )
    return Check(
        "build",
        "warn",
        f"{build.name} is not installed yet (installs on first use)",
        f"repro build {build.name} now, so the sweep does not start with an install",
    )


def port_check(profile: Profile, port: int | None, url: str | None) -> Check:
    if url:
        return Check("port", "skip", f"attached to {url}: the harness starts no server")
    port = port if port is not None else profile.port
    free = port_is_free(profile.host, port)
    return Check(
        "port",
        "ok" if free else "fail",
        f"{profile.host}:{port} {'free' if free else 'in use'}",
        "stop what listens there, or pass --port",
    )


def url_check(url: str) -> Check:
    """Attach mode: the URL is a well-formed http(s)://host[:port] and its /health answers 200
    (a doctor that passes a dead or mistyped URL only moves the failure to the sweep)."""
    from urllib.parse import urlparse

    import requests

    from harness.serve.endpoints import loopback_session

    remedy = "start the server, or pass the URL it listens on (http://HOST:PORT)"
    try:
        parsed = urlparse(url)  # raises on "http://[::1" (an unclosed IPv6 bracket)
        parsed.port  # noqa: B018 - raises on a non-numeric or out-of-range port
        well_formed = parsed.scheme in ("http", "https") and bool(parsed.hostname)
    except ValueError:
        well_formed = False
    if not well_formed:
        return Check("server", "fail", f"--url {url!r}: not an http(s)://HOST:PORT URL", remedy)
    base = url.rstrip("/").removesuffix("/v1")
    try:
        status = loopback_session().get(f"{base}/health", timeout=HUB_TIMEOUT_S).status_code
    except requests.RequestException as exc:
        reason = type(exc).__name__
        return Check("server", "fail", f"{base}/health did not answer ({reason})", remedy)
    if status != 200:
        return Check("server", "fail", f"{base}/health answered HTTP {status}", remedy)
    return Check("server", "ok", f"{base}/health answered 200")


def preflight(
    profile: Profile,
    *,
    url: str | None = None,
    port: int | None = None,
    hub: Callable[[Profile], list[Check]] | None = None,
) -> list[Check]:
    """Every check for running `profile` here (with `url`: only what the client side needs)."""
    from harness.serve.hubcheck import hub_checks

    checks: list[Check] = []
    if url is None:
        gpus = query_gpus() if profile.gpus > 0 else []
        checks += gpu_checks(profile, gpus)
        checks += memory_checks(profile, mem_available_gib())
        checks += shm_checks(profile)
        checks += disk_checks(profile)
        checks.append(build_check(profile, gpus))
    checks.append(port_check(profile, port, url))
    checks += (hub or hub_checks)(profile)
    return checks


def require_ready(
    profile: Profile, *, url: str | None = None, port: int | None = None
) -> list[Check]:
    """`preflight`, raising PreflightError (one line per failing check) if any check fails.

    For `repro sweep`: call before it installs a build or starts a server; log the returned
    warnings. With `url` (attach mode) only the client-side checks run.
    """
    checks = preflight(profile, url=url, port=port)
    raise_on_failures(checks, f"preflight for profile {profile.name} (repro doctor)")
    return checks
