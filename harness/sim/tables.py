"""The simulated client's per-request table, carried beside a point's (record, samples).

`simulate_points` returns (record, samples) pairs that several callers unpack; a
:class:`PointOutput` is such a pair that also carries the point's table, which
`write_simulated_run` writes as `requests.parquet` (harness/analysis/request_table.py). The
table's percentiles and goodput are added to the record's metrics when the pair is made.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis.goodput import merge_table_metrics, table_metrics
from harness.analysis.request_table import TABLE_NAME, build_table, write_table
from harness.analysis.slo import parse_slo
from harness.sim.client import PointClient, table_rows


class PointOutput(tuple):
    """(record, samples) with the point's per-request table as `.table`."""

    table: pd.DataFrame | None = None


def with_table(record: Any, samples: list[Any], client: PointClient, sweep: Any) -> PointOutput:
    out = PointOutput((record, samples))
    if client.records:
        frame = build_table(table_rows(client.records))
        slo = getattr(sweep, "slo", None)
        objectives = parse_slo(slo, source="sweep.slo") if slo else None
        record.metrics = merge_table_metrics(record.metrics, table_metrics(frame, objectives))
        out.table = frame
    return out


def write_point_table(point_dir: Path, item: Any) -> None:
    table = getattr(item, "table", None)
    if table is not None:
        write_table(point_dir / TABLE_NAME, table)
