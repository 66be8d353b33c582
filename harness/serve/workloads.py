"""Workload files: what the client sends in a sweep (docs/workloads.md §1).

``datasets/workloads/<name>.yaml`` holds the points (concurrency, requests), the output length,
the dataset offset, ignore_eos, multi-turn and max turns, extra request arguments, think time
and latency objectives. A profile names one (``workload: blog-openhands-13turn``); its
``sweep:`` block keeps only how the harness runs the points (dataset, scrape interval, timeouts,
pauses, warm-up). Unknown keys are errors naming the file and the key.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, Field, NonNegativeInt, PositiveInt, Strict, field_validator

from harness.analysis.slo import parse_slo
from harness.config import load_yaml
from harness.dataset.thinktime import NO_THINK_TIME, ThinkTime
from harness.errors import ConfigError
from harness.names import check_name, for_terminal
from harness.paths import DATASETS_DIR

WORKLOADS_DIR = DATASETS_DIR / "workloads"

_Count = Annotated[int, Strict(), Field(gt=0)]


class WorkloadFields(BaseModel, extra="forbid"):
    """What the client sends, declared once: a workload file's fields (:class:`WorkloadSpec`)
    and the first part of a profile's resolved `sweep` (harness.serve.profiles.SweepSpec), under
    the same names and checks."""

    # (parallel, number): both >= 1; EvalScope turns 0 into sentinels that look like metrics.
    # Strict: `true` is not a concurrency (pydantic would read it as 1).
    points: list[tuple[_Count, _Count]] = Field(min_length=1)
    dataset_offset: NonNegativeInt
    max_tokens: PositiveInt
    ignore_eos: bool = True
    multi_turn: bool = True
    max_turns: PositiveInt | None = None
    extra_args: dict[str, Any] = {}
    # agents pause between turns (harness/dataset/thinktime.py); none: replay back to back
    think_time: ThinkTime = NO_THINK_TIME
    # latency objectives for goodput, e.g. "ttft=2s,tpot=50ms" (harness/analysis/slo.py)
    slo: str | None = None

    @field_validator("slo")
    @classmethod
    def _objectives(cls, slo: str | None) -> str | None:
        return check_slo(slo)

    @field_validator("points")
    @classmethod
    def _distinct_points(cls, points: list[tuple[int, int]]) -> list[tuple[int, int]]:
        return check_distinct_points(points)


class WorkloadSpec(WorkloadFields):
    """One workload file: what the client sends, and a description for people."""

    description: str = ""

    def sweep_fields(self) -> dict[str, Any]:
        """The fields a profile's resolved `sweep` takes from this workload."""
        return self.model_dump(exclude={"description"})


WORKLOAD_FIELDS = tuple(WorkloadFields.model_fields)


def check_slo(slo: str | None) -> str | None:
    try:
        return None if slo is None else parse_slo(slo, source="slo").text()
    except ConfigError as exc:
        raise ValueError(str(exc).removeprefix("slo: ")) from None


def check_distinct_points(points: list[tuple[int, int]]) -> list[tuple[int, int]]:
    # two equal points share one point directory: the second would overwrite the first
    twice = sorted({p for p in points if points.count(p) > 1})
    if twice:
        given = ", ".join(f"[{p}, {n}]" for p, n in twice)
        raise ValueError(f"{given} given twice (one directory per point; use --repeats)")
    return points


def known_workloads() -> list[str]:
    return sorted(p.stem for p in WORKLOADS_DIR.glob("*.yaml"))


def workload_path(name_or_path: str, relative_to: Path | None = None) -> Path:
    """A workload name (datasets/workloads/<name>.yaml) or a YAML path (relative to the profile
    that names it, when it exists there)."""
    candidate = Path(name_or_path).expanduser()
    if candidate.suffix in (".yaml", ".yml") or "/" in name_or_path:
        if not candidate.is_absolute() and relative_to is not None:
            beside = relative_to / candidate
            if beside.exists():
                return beside
        return candidate
    check_name(name_or_path, "workload")
    return WORKLOADS_DIR / f"{name_or_path}.yaml"


def load_workload_spec(name_or_path: str, relative_to: Path | None = None) -> WorkloadSpec:
    path = workload_path(name_or_path, relative_to)
    if not path.is_file():
        known = ", ".join(known_workloads())
        raise ConfigError(
            f"{for_terminal(path)}: workload {name_or_path!r} not found (known: {known})"
        )
    return load_yaml(path, WorkloadSpec, "workload")


def workload_digest(spec: WorkloadSpec) -> str:
    """12 hex digits over what the client sends (the description left out): equal digests,
    equal workloads, whatever the files are called."""
    blob = json.dumps(spec.sweep_fields(), sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]
