"""Launch provenance: host facts, the relevant environment, KV-capacity log lines, cache config.

Everything here is read-only and cheap; the server calls it once per launch and the record goes
next to the server log (and into a run's manifest).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from harness import metric_names as mn

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# vLLM's start-up lines that state KV capacity (GPU and CPU builds, HiSparse forks, overrides).
KV_CAPACITY_PATTERNS = (
    re.compile(r"GPU KV cache size: ([\d,]+) tokens"),
    re.compile(r"CPU KV cache size: ([\d,]+) tokens"),
    re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x"),
    re.compile(r"HiSparse steady-state maximum concurrency"),
    re.compile(r"HiSparse HMA: "),
    re.compile(r"HiSparse"),
    re.compile(r"Overriding num_gpu_blocks=\d+ with num_gpu_blocks_override=\d+"),
    re.compile(r"# (?:GPU|CPU) blocks: \d+"),
)
ENV_PREFIXES = (
    "VLLM_",
    "HF_",
    "TRANSFORMERS_",
    "TORCH",
    "CUDA_",
    "NCCL_",
    "OMP_",
    "KMP_",
    "PYTORCH_",
    "LD_PRELOAD",
)
ENV_NAMES = ("TMPDIR", "NO_PROXY", "no_proxy", "DO_NOT_TRACK", "REPRO_CACHE")
SECRET = re.compile(r"TOKEN|KEY|SECRET|PASSWORD", re.IGNORECASE)


def relevant_env(env: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    """The variables that change what vLLM does, without secrets."""
    return {
        k: v
        for k, v in sorted(env.items())
        if (k.startswith(ENV_PREFIXES) or k in ENV_NAMES) and not SECRET.search(k)
    }


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def nvidia_smi() -> dict[str, Any] | None:
    """GPU inventory from nvidia-smi, or None where there is no NVIDIA driver."""
    if not shutil.which("nvidia-smi"):
        return None
    query = "index,name,memory.total,driver_version,pci.bus_id"
    proc = subprocess.run(
        ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    full = subprocess.run(["nvidia-smi"], check=False, capture_output=True, text=True, timeout=30)
    gpus = [
        dict(zip(query.split(","), (c.strip() for c in line.split(",")), strict=False))
        for line in proc.stdout.splitlines()
        if line.strip()
    ]
    return {"gpus": gpus, "count": len(gpus), "output": full.stdout, "returncode": full.returncode}


def host_facts() -> dict[str, Any]:
    """CPU model, cores, RAM, OS and nvidia-smi output where present."""
    cpuinfo = _read("/proc/cpuinfo")
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    flags = re.search(r"^flags\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    meminfo = _read("/proc/meminfo")
    mem_kib = re.search(r"^MemTotal:\s*(\d+) kB", meminfo, re.MULTILINE)
    avail_kib = re.search(r"^MemAvailable:\s*(\d+) kB", meminfo, re.MULTILINE)
    isa = sorted(
        {
            f
            for f in (flags.group(1).split() if flags else [])
            if f in ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16")
        }
    )
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": model.group(1).strip() if model else platform.processor(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_isa": isa,
        "ram_gib": round(int(mem_kib.group(1)) / 2**20, 2) if mem_kib else None,
        "ram_available_gib": round(int(avail_kib.group(1)) / 2**20, 2) if avail_kib else None,
        "nvidia_smi": nvidia_smi(),
    }


def kv_capacity_lines(log_text: str) -> dict[str, Any]:
    """vLLM's start-up KV-capacity lines, verbatim, plus the numbers they state."""
    lines: list[str] = []
    tokens: int | None = None
    concurrency: float | None = None
    for raw in log_text.splitlines():
        line = ANSI.sub("", raw).strip()
        if not any(p.search(line) for p in KV_CAPACITY_PATTERNS):
            continue
        lines.append(line)
        match = KV_CAPACITY_PATTERNS[0].search(line) or KV_CAPACITY_PATTERNS[1].search(line)
        if match:
            tokens = int(match.group(1).replace(",", ""))
        match = KV_CAPACITY_PATTERNS[2].search(line)
        if match and "HiSparse" not in line:
            concurrency = float(match.group(2))
    return {"lines": lines, "kv_cache_tokens": tokens, "max_concurrency": concurrency}


def cache_config_labels(metrics_text: str) -> list[dict[str, str]]:
    """Labels of every cache-config info sample (`metric_names.CACHE_CONFIG_INFO`) (one per engine)."""
    out = []
    for family in text_string_to_metric_families(metrics_text):
        if family.name == mn.CACHE_CONFIG_INFO:
            out += [
                dict(sample.labels)
                for sample in family.samples
                if sample.name == mn.CACHE_CONFIG_INFO
            ]
    return out
