"""Shared test helpers (moved from test_figures_crafted.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.report.figures import (
    load_published,
)
from harness.results import (
    POINT_SCHEMA,
    PointRecord,
    RunLayout,
    RunManifest,
    atomic_write_json,
    point_id,
)

T0 = 1_790_000_000.0


def write_samples(
    path: Path, start: float, parallel: int, *, spec: bool, seconds: int = 20
) -> None:
    """A plausible samples.csv: two engines, running ramps to `parallel`, counters increase."""
    lines = ["timestamp,monotonic,name,labels,value"]
    accepted = drafts = preempt = 0.0
    for i in range(seconds):
        ts, mono = start + i, 1000.0 + i
        running = min(parallel, i + 1)
        for engine in ("0", "1"):
            labels = json.dumps({"engine": engine, "model_name": "tiny"}).replace('"', '""')
            share = running / 2
            lines.append(f'{ts},{mono},vllm:num_requests_running,"{labels}",{share}')
            lines.append(f'{ts},{mono},vllm:num_requests_waiting,"{labels}",{i % 3}')
            lines.append(f'{ts},{mono},vllm:kv_cache_usage_perc,"{labels}",{min(1, i / seconds)}')
            lines.append(f'{ts},{mono},vllm:num_preemptions_total,"{labels}",{preempt}')
            if spec:
                lines.append(f'{ts},{mono},vllm:spec_decode_num_drafts_total,"{labels}",{drafts}')
                lines.append(
                    f'{ts},{mono},vllm:spec_decode_num_accepted_tokens_total,"{labels}",{accepted}'
                )
        drafts += 10
        accepted += 6 + (i % 4)
        preempt += 1 if i % 7 == 6 else 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_run(
    root: Path,
    run_id: str,
    points: list[dict[str, Any]],
    *,
    gpus: int = 8,
    profile_name: str = "hisparse384",
    build: dict | None = None,
    workload_key: str = "wk1",
    spec: bool = True,
) -> Path:
    """A run directory; each point dict has parallel, number and metric values (plus optional
    repeat, valid, invalid_reasons)."""
    layout = RunLayout(root)
    manifest = RunManifest(
        run_id=run_id,
        status="complete",
        created_at=T0,
        finished_at=T0 + 3600,
        harness_version="0.1.0",
        engine="vllm",
        base_url="http://127.0.0.1:8000",
        profile_name=profile_name,
        profile={
            "name": profile_name,
            "model": "zai-org/GLM-5.3",
            "gpus": gpus,
            "serve": {"served-model-name": "glm-agentx", "tensor-parallel-size": 8},
        },
        overrides=["sweep.max_tokens=220"],
        gpus=gpus,
        serve_command=["vllm", "serve", "zai-org/GLM-5.3", "--tensor-parallel-size", "8"],
        build=build or {"name": "hisparse", "commit": "e8ef1e07bd2f174bebfe34c3a3e35e952931efb1"},
        dataset={
            "path": "/data/openhand.json",
            "sha256": "ab" * 32,
            "recipe": "openhands-glm53",
            "manifest": {
                "first_turn_length": 74160,
                "subsequent_turn_length": 753,
                "num_turns": 13,
            },
        },
        workload_key=workload_key,
        client={"name": "evalscope", "version": "1.7.0"},
        host={"hostname": "node1", "nvidia_smi": {"gpus": [{"name": "NVIDIA H200"}], "count": 8}},
        sweep={"max_tokens": 220, "ignore_eos": True, "dataset_offset": 52},
    )
    atomic_write_json(layout.manifest, manifest)
    for spec_point in points:
        parallel, number = spec_point["parallel"], spec_point["number"]
        repeat = spec_point.get("repeat", 0)
        pid = point_id(parallel, number, repeat)
        metrics = {
            k: v
            for k, v in spec_point.items()
            if k not in {"parallel", "number", "repeat", "valid", "invalid_reasons"}
        }
        start = T0 + 100 * parallel + 10 * repeat
        record = PointRecord(
            schema_version=POINT_SCHEMA,
            point_id=pid,
            label=f"c{parallel}",
            parallel=parallel,
            number=number,
            repeat=repeat,
            dataset_offset=52,
            conversations=list(range(number)),
            turns=13,
            expected_requests=13 * number,
            started_at=start,
            ended_at=start + 20,
            window=(start, start + 20),
            valid=spec_point.get("valid", True),
            invalid_reasons=spec_point.get("invalid_reasons", []),
            metrics=metrics,
            samples=20,
        )
        write_samples(layout.samples_csv(pid), start, parallel, spec=spec)
        atomic_write_json(layout.point_json(pid), record)
    return root


def published_points(series_index: int) -> list[dict[str, Any]]:
    """The blog's published series as crafted points (so tests know the right answers)."""
    _, series = load_published()
    return [
        {
            "parallel": p.parallel,
            "number": p.number,
            **{k: v for k, v in p.values.items() if v is not None},
        }
        for p in series[series_index].points
    ]
