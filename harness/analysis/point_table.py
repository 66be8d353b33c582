"""Keep a point's per-request table and add what it measures to the point's metrics.

One call per point, from the real sweep (`harness.run.point`) and from the simulator
(`harness.sim.run`), so both write the same `requests.parquet` and the same percentile and
goodput metrics.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.analysis.goodput import merge_table_metrics, table_metrics
from harness.analysis.request_table import (
    TABLE_NAME,
    RequestRow,
    build_table,
    dataset_keys,
    read_evalscope_rows,
    write_table,
)
from harness.analysis.slo import parse_slo
from harness.errors import ReproError


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
    objectives = parse_slo(slo, source="sweep.slo") if slo else None
    return merge_table_metrics(metrics, table_metrics(frame, objectives))


def keep_evalscope_table(
    point_dir: Path,
    evalscope_point_dir: Path,
    metrics: dict[str, float | None],
    *,
    notes: list[str],
    dataset: Path | None,
    think_log: Path | None,
    slo: str | None,
    time_scale: float = 1.0,
    epoch_offset: float | None = None,
) -> dict[str, float | None]:
    """`keep_request_table` from EvalScope's sqlite; an unreadable one leaves no table and a
    note saying why (the point's other records do not depend on it)."""
    try:
        rows = read_evalscope_rows(evalscope_point_dir, dataset_keys(dataset), think_log)
    except ReproError as exc:
        notes.append(str(exc))
        return metrics
    return keep_request_table(
        point_dir, rows, metrics, slo=slo, time_scale=time_scale, epoch_offset=epoch_offset
    )


def point_table(run_root: Path, point_id: str) -> pd.DataFrame | None:
    """A finished point's table, or None when the point has none (runs before the table)."""
    from harness.analysis.request_table import read_table

    path = Path(run_root) / "points" / point_id / TABLE_NAME
    return read_table(path) if path.exists() else None
