"""Shared test helpers (moved from test_regress_gate.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from harness.gate.policy import load_regression_policy
from harness.gate.regress import (
    view_from_parts,
)
from harness.results import (
    PointRecord,
    RunLayout,
    RunManifest,
    atomic_write_json,
    point_id,
    write_summary,
)

REPO = Path(__file__).resolve().parents[2]


GPU_POLICY = load_regression_policy(REPO / "launch/policies/default.yaml")


BLOG_POINTS = [(1, 4), (8, 16), (16, 32), (24, 48), (32, 64)]


SEEDS = 500


def model_metrics(parallel: int) -> dict[str, float]:
    """A smooth, plausible serving curve: throughput rises, interactivity falls with load."""
    return {
        "throughput_per_gpu": 5000.0 * parallel**0.25,
        "interactivity": 250.0 / parallel**0.8,
        "occupancy": 0.85 * parallel,
        "mean_ttft_ms": 800.0 + 60.0 * parallel,
        "p99_ttft_ms": 2500.0 + 150.0 * parallel,
        "mtp_acceptance_length": 2.6,
        "prefix_cache_hit_rate": 0.9,
        "preemptions": 0.0,
    }


def manifest_data(
    run_id: str,
    *,
    profile: str = "hisparse384",
    gpus: int = 8,
    points: list[tuple[int, int]] = BLOG_POINTS,
    sha: str = "d" * 64,
    overrides: list[str] | None = None,
    status: str = "complete",
    serve: dict[str, Any] | None = None,
) -> dict[str, Any]:
    sweep = {
        "points": [list(p) for p in points],
        "dataset": "synthetic",
        "dataset_offset": 52,
        "max_tokens": 220,
        "ignore_eos": True,
        "multi_turn": True,
        "max_turns": None,
        "extra_args": {},
    }
    return {
        "run_id": run_id,
        "status": status,
        "created_at": time.time(),
        "harness_version": "test",
        "engine": "vllm",
        "base_url": "http://127.0.0.1:1",
        "profile_name": profile,
        "profile": {
            "name": profile,
            "build": "cpu-0.32.0" if gpus == 0 else "blog",
            "gpus": gpus,
            "serve": serve or {"max-model-len": 4096},
        },
        "overrides": overrides or [],
        "gpus": max(gpus, 1),
        "dataset": {"path": "/tmp/ds.json", "sha256": sha},
        "workload_key": "wk-" + json.dumps(serve or {}, sort_keys=True),
        "client": {"name": "evalscope", "version": "1.7.0"},
        "host": {
            "cpu_model": "synthetic",
            "cpu_count": 2,
            "gpus": [] if gpus == 0 else ["H200"] * 8,
        },
        "sweep": sweep,
    }


def point_rows(
    rng: np.random.Generator,
    *,
    sigma: float,
    repeats: int = 1,
    points: list[tuple[int, int]] = BLOG_POINTS,
    steps: dict[str, float] | None = None,
    invalid: set[str] | None = None,
) -> list[dict[str, Any]]:
    rows = []
    for repeat in range(repeats):
        for parallel, number in points:
            metrics: dict[str, float | None] = {}
            for key, value in model_metrics(parallel).items():
                if key == "preemptions":
                    metrics[key] = value
                    continue
                factor = 1.0 + (steps or {}).get(key, 0.0)
                metrics[key] = value * factor * (1.0 + rng.normal(0.0, sigma))
            label = f"c{parallel}"
            bad = bool(invalid and label in invalid)
            rows.append(
                {
                    "label": label,
                    "parallel": parallel,
                    "number": number,
                    "repeat": repeat,
                    "valid": not bad,
                    "invalid_reasons": ["failed requests: 3"] if bad else [],
                    "metrics": metrics,
                }
            )
    return rows


def synthetic_view(name: str, rng: np.random.Generator, *, sigma: float, **kwargs: Any):
    manifest_kwargs = {
        k: kwargs.pop(k)
        for k in ("profile", "gpus", "sha", "overrides", "status", "serve")
        if k in kwargs
    }
    if "points" in kwargs:
        manifest_kwargs["points"] = kwargs["points"]
    return view_from_parts(
        name=name,
        source=name,
        manifest_data=manifest_data(name, **manifest_kwargs),
        rows=point_rows(rng, sigma=sigma, **kwargs),
    )


def write_run(
    parent: Path, name: str, rng: np.random.Generator, *, sigma: float = 0.0, **kwargs: Any
) -> Path:
    """A real run directory (manifest, point.json files, summary) for CLI and history tests."""
    manifest_kwargs = {
        k: kwargs.pop(k)
        for k in ("profile", "gpus", "sha", "overrides", "status", "serve")
        if k in kwargs
    }
    if "points" in kwargs:
        manifest_kwargs["points"] = kwargs["points"]
    layout = RunLayout(parent / name)
    manifest = RunManifest.model_validate(manifest_data(name, **manifest_kwargs))
    atomic_write_json(layout.manifest, manifest)
    records = []
    for row in point_rows(rng, sigma=sigma, **kwargs):
        pid = point_id(row["parallel"], row["number"], row["repeat"])
        record = PointRecord(
            point_id=pid,
            label=row["label"],
            parallel=row["parallel"],
            number=row["number"],
            repeat=row["repeat"],
            dataset_offset=52,
            conversations=list(range(row["number"])),
            turns=13,
            expected_requests=13 * row["number"],
            started_at=1.0,
            ended_at=2.0,
            window=(1.0, 2.0),
            valid=row["valid"],
            invalid_reasons=row["invalid_reasons"],
            metrics=row["metrics"],
            samples=10,
        )
        atomic_write_json(layout.point_json(pid), record)
        records.append(record)
    write_summary(layout, name, records)
    return layout.root


def history_views(rng: np.random.Generator, count: int = 5, **kwargs: Any) -> list:
    return [synthetic_view(f"base{i}", rng, **kwargs) for i in range(count)]


def repro(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    code = "import sys; from harness.cli import main; sys.argv[0] = 'repro'; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
