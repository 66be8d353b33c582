"""The simulated client's per-request table, carried beside a point's (record, samples).

`simulate_points` returns (record, samples) pairs that several callers unpack; a
:class:`PointOutput` is such a pair that also carries the point's table, which
`write_simulated_run` writes as `requests.parquet` (harness/analysis/request_table.py). The
table is built from the point's Measurement (`harness.sim.run`), and its percentiles and
goodput are added to the record's metrics when the pair is made.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis.request_table import TABLE_NAME, write_table


class PointOutput(tuple):
    """(record, samples) with the point's per-request table as `.table`."""

    table: pd.DataFrame | None = None


def write_point_table(point_dir: Path, item: Any) -> None:
    table = getattr(item, "table", None)
    if table is not None:
        write_table(point_dir / TABLE_NAME, table)
