"""Per-point, per-metric comparison of two runs (A = baseline, B = candidate).

Points are matched by (parallel, number); repeats are reduced to their median first
(`harness.figures.reduce_repeats`). For every metric of `harness.results.METRICS`:

    delta = B - A,   ratio = B / A (None when A is 0 or either side is missing)

and a verdict from the metric's direction of "better": ``better`` / ``worse`` when the relative
change exceeds `tolerance` in that direction, ``same`` within it, ``info`` for metrics without a
direction, ``n/a`` when a side is missing. A point present in one run only gives rows with
verdict ``missing``. Rows also say whether either side was an invalid point: a comparison that
involves an invalid point is reported, never silently dropped.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from harness.figures import SeriesPoint, series_points
from harness.results import METRICS, Run

DEFAULT_TOLERANCE = 0.02  # relative change below which two values are called the same


def verdict(metric: str, a: float | None, b: float | None, tolerance: float = DEFAULT_TOLERANCE
            ) -> str:
    """better / worse / same / info / n/a for B against A on `metric`."""
    if a is None or b is None:
        return "n/a"
    direction = METRICS[metric].better
    if direction is None:
        return "info"
    if abs(b - a) <= tolerance * abs(a):  # a == 0: only b == 0 is "same"
        return "same"
    return "better" if (b > a) == (direction == "higher") else "worse"

def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or a == 0:
        return None
    value = b / a
    return value if math.isfinite(value) else None


def compare_points(a: SeriesPoint | None, b: SeriesPoint | None,
                   tolerance: float = DEFAULT_TOLERANCE) -> list[dict[str, Any]]:
    """Rows for one matched point (either side may be missing)."""
    ref = a or b
    assert ref is not None
    rows = []
    for key, spec in METRICS.items():
        va = a.values.get(key) if a else None
        vb = b.values.get(key) if b else None
        rows.append({
            "point": ref.label,
            "parallel": ref.parallel,
            "number": ref.number,
            "metric": key,
            "label": spec.label,
            "unit": spec.unit,
            "better": spec.better,
            "a": va,
            "b": vb,
            "delta": None if va is None or vb is None else vb - va,
            "ratio": _ratio(va, vb),
            "verdict": "missing" if a is None or b is None else verdict(key, va, vb, tolerance),
            "a_valid": None if a is None else a.valid,
            "b_valid": None if b is None else b.valid,
            "a_repeats": None if a is None else a.repeats,
            "b_repeats": None if b is None else b.repeats,
        })
    return rows


def compare_runs(a: Run, b: Run, *, tolerance: float = DEFAULT_TOLERANCE) -> list[dict[str, Any]]:
    """Per point x metric rows of B against A (see module doc), in sweep order."""
    left = {(p.parallel, p.number): p for p in series_points(a)}
    right = {(p.parallel, p.number): p for p in series_points(b)}
    rows: list[dict[str, Any]] = []
    for key in sorted(set(left) | set(right)):
        rows.extend(compare_points(left.get(key), right.get(key), tolerance))
    return rows


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if value == 0:
        return "0"
    if abs(value) >= 1e7 or abs(value) < 1e-3:
        return f"{value:.3e}"
    return f"{value:.6g}"


MARKS = {"better": "better ▲", "worse": "WORSE ▼", "same": "same", "info": "", "n/a": "",
         "missing": "missing"}


def render_table(rows: Sequence[dict[str, Any]], a_name: str, b_name: str,
                 *, include_empty: bool = False, tolerance: float = DEFAULT_TOLERANCE) -> str:
    """A plain-text table, one block per point; metrics missing on both sides are skipped."""
    legend = ("ratio = B/A; better/worse by each metric's direction (higher/lower is better), "
              f"same within {tolerance:.0%}")
    lines = [f"A = {a_name}", f"B = {b_name}", legend, ""]
    header = ("metric", "better", "A", "B", "delta", "ratio", "verdict")
    current = None
    table: list[tuple[str, ...]] = []

    def flush() -> None:
        if not table:
            return
        widths = [max(len(row[i]) for row in [header, *table]) for i in range(len(header))]
        lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
        for row in table:
            lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        lines.append("")
        table.clear()

    for row in rows:
        key = (row["point"], row["parallel"], row["number"])
        if key != current:
            flush()
            current = key
            flags = []
            if row["a_valid"] is False:
                flags.append("A invalid")
            if row["b_valid"] is False:
                flags.append("B invalid")
            title = f"{row['point']} (parallel {row['parallel']}, {row['number']} conversations)"
            lines.append(title + (f"  [{', '.join(flags)}]" if flags else ""))
        if not include_empty and row["a"] is None and row["b"] is None:
            continue
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.3f}x"
        table.append((f"{row['label']} ({row['unit']})", row["better"] or "-", _fmt(row["a"]),
                      _fmt(row["b"]), _fmt(row["delta"]), ratio, MARKS.get(row["verdict"], "")))
    flush()
    return "\n".join(lines).rstrip() + "\n"


def compare_json(a: Run, b: Run, rows: Sequence[dict[str, Any]],
                 tolerance: float = DEFAULT_TOLERANCE) -> str:
    return json.dumps({"a": a.name, "b": b.name, "a_dir": str(a.root), "b_dir": str(b.root),
                       "tolerance": tolerance, "rows": list(rows)}, indent=2) + "\n"
