"""Keep a point's per-request table and add what it measures to the point's metrics.

The table is built from a point's :class:`harness.measurement.Measurement`, by the served
sweep (`harness.run.point`) and by the simulator (`harness.sim.run`) alike, so both write the
same `requests.parquet` and the same percentile and goodput metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis.goodput import merge_table_metrics, table_metrics
from harness.analysis.request_table import TABLE_NAME, RequestRow, build_table, write_table
from harness.analysis.slo import Objectives, parse_slo
from harness.measurement import Measurement, RequestRecord


def keep_request_table(
    point_dir: Path,
    rows: list[RequestRow],
    metrics: dict[str, float | None],
    *,
    slo: str | None,
    time_scale: float = 1.0,
    epoch_offset: float | None = None,
) -> dict[str, float | None]:
    """Write ``point_dir/requests.parquet``; the metrics with percentiles (and goodput when the
    workload names objectives). No rows (the client wrote nothing): metrics unchanged."""
    if not rows:
        return metrics
    frame = build_table(rows, time_scale=time_scale, epoch_offset=epoch_offset)
    write_table(point_dir / TABLE_NAME, frame)
    return with_table_metrics(metrics, frame, slo=slo)


def table_rows(requests: Sequence[RequestRecord]) -> list[RequestRow]:
    """Per-request records as table rows: a failed request has no end, TTFT or output tokens
    in the table (whatever its client recorded); an unknown conversation is -1."""
    return [
        RequestRow(
            conversation=r.conversation if r.conversation is not None else -1,
            turn=r.turn if r.turn is not None else 1,
            start=r.start,
            end=r.end if r.success else None,
            ttft=r.ttft if r.success else None,
            output_tokens=r.output_tokens if r.success else None,
            prompt_tokens=r.prompt_tokens,
            success=r.success,
            itl=list(r.itl),
            think=r.think,
            server_cached=r.server_cached,
        )
        for r in requests
    ]


def request_frame(m: Measurement) -> pd.DataFrame | None:
    """The point's table (times x the measurement's time scale); None without requests."""
    if not m.requests:
        return None
    return build_table(table_rows(m.requests), time_scale=m.time_scale, epoch_offset=m.epoch_offset)


def with_table_metrics(
    metrics: dict[str, float | None], frame: pd.DataFrame, *, slo: str | None
) -> dict[str, float | None]:
    """The metrics plus the table's percentiles (and goodput when the workload names
    objectives); values already measured are kept."""
    objectives = parse_slo(slo, source="sweep.slo") if slo else None
    return merge_table_metrics(metrics, table_metrics(frame, objectives))


def keep_measurement_table(
    point_dir: Path, m: Measurement, metrics: dict[str, float | None], *, slo: str | None
) -> dict[str, float | None]:
    """Write ``point_dir/requests.parquet`` from the measurement's requests; the metrics with
    the table's. No requests (the client wrote none): no table, metrics unchanged."""
    frame = request_frame(m)
    if frame is None:
        return metrics
    write_table(point_dir / TABLE_NAME, frame)
    return with_table_metrics(metrics, frame, slo=slo)


def point_table(run_root: Path, point_id: str) -> pd.DataFrame | None:
    """A finished point's table, or None when the point has none (runs before the table)."""
    from harness.analysis.request_table import read_table

    path = Path(run_root) / "points" / point_id / TABLE_NAME
    return read_table(path) if path.exists() else None


def apply_objectives(run: Any, objectives: Objectives) -> str:
    """Recompute `goodput_rps` and `slo_attainment` of every point of a loaded run (in memory)
    from its table under ``objectives`` (e.g. `claims check --slo`); returns a note."""
    done, missing = 0, 0
    for point in run.points:
        table = point_table(run.root, point.point_id)
        if table is None:
            missing += 1
            point.metrics["goodput_rps"] = point.metrics["slo_attainment"] = None
            continue
        extra = table_metrics(table, objectives)
        point.metrics["goodput_rps"] = extra.get("goodput_rps")
        point.metrics["slo_attainment"] = extra.get("slo_attainment")
        done += 1
    note = f"run {run.name}: goodput under {objectives.text()} from {done} per-request tables"
    return note + (f" ({missing} points without one: no value)" if missing else "")
