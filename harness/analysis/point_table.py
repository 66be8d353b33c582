"""Keep a point's per-request table and add what it measures to the point's metrics.

One call per point, from the real sweep (`harness.run.point`) and from the simulator
(`harness.sim.run`), so both write the same `requests.parquet` and the same percentile and
goodput metrics.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
from harness.analysis.slo import Objectives, parse_slo
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
