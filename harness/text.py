"""Small text forms shared by every table the harness prints or renders."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable
from typing import Any


def fmt_number(
    value: float | None,
    *,
    digits: int = 4,
    fixed: int | None = None,
    missing: str = "-",
    sci_below: float | None = None,
    sci_from: float | None = None,
    sci_digits: int = 3,
    whole_from: float | None = None,
    thousands: bool = False,
) -> str:
    """A number for a table cell.

    ``missing`` for None or NaN; with ``sci_below``, "0" for zero and scientific notation
    (``sci_digits``) when 0 < |value| < ``sci_below``; also scientific when |value| >=
    ``sci_from``; no decimals (comma-grouped with ``thousands``) when |value| >=
    ``whole_from``; otherwise ``fixed`` decimals, or ``digits`` significant digits.
    """
    if value is None or math.isnan(value):
        return missing
    size = abs(value)
    if sci_below is not None and size == 0:
        return "0"  # not "0.000e+00", nor "-0"
    if (sci_below is not None and 0 < size < sci_below) or (
        sci_from is not None and size >= sci_from
    ):
        return f"{value:.{sci_digits}e}"
    if whole_from is not None and size >= whole_from:
        return f"{value:,.0f}" if thousands else f"{value:.0f}"
    if fixed is not None:
        return f"{value:.{fixed}f}"
    return f"{value:.{digits}g}"


def int_ranges(values: Iterable[int], *, sort: bool = True) -> str:
    """Compact text form of integers: [0, 1, 2, 5] -> '0-2, 5' (sorted and deduplicated unless
    ``sort=False``, which keeps the given order and only joins consecutive runs)."""
    items = sorted(set(values)) if sort else list(values)
    parts: list[str] = []
    start = prev = None
    for value in items:
        if start is None:
            start = prev = value
        elif value == prev + 1:  # type: ignore[operator]  # prev is set together with start
            prev = value
        else:
            parts.append(f"{start}-{prev}" if start != prev else f"{start}")
            start = prev = value
    if start is not None:
        parts.append(f"{start}-{prev}" if start != prev else f"{start}")
    return ", ".join(parts)


def rows_to_csv(rows: list[dict[str, Any]]) -> str:
    columns: list[str] = []
    for row in rows:
        columns.extend(key for key in row if key not in columns)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buffer.getvalue()


def modified_text(params: Any) -> str:
    """What a calibrated simulated run moved off its fit (`--set sim.NAME=VALUE`), as its label
    says it: " + sim.hbm_eff=0.7"; empty when nothing was moved."""
    if not isinstance(params, dict) or not params:
        return ""
    return " + " + ", ".join(f"sim.{k}={v:g}" for k, v in sorted(params.items()))
