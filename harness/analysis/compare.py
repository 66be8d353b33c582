"""Per-point, per-metric comparison of two runs (A = baseline, B = candidate), for reading.

This is `repro compare` and the dashboard's ratio columns: it informs, it never fails. The gate
(thresholds, confidence intervals, history baselines, exit codes) is `harness.gate.regress`.

Points are matched by (parallel, number); repeats are reduced to their median first
(`harness.analysis.groups.reduce_repeats`). For every metric of `harness.results.METRICS`:

    delta = B - A,   ratio = B / A (None when A is 0 or either side is missing)

and a verdict from the metric's direction of "better": ``better`` / ``worse`` when the relative
change exceeds `tolerance` in that direction, ``same`` within it, ``info`` for metrics without a
direction, ``n/a`` when a side is missing. A point present in one run only gives rows with
verdict ``missing``. Rows also say whether either side was an invalid point: a comparison that
involves an invalid point is reported, never silently dropped. Two runs with different workload
identities (`harness.identity.workload_identity`) are still compared, with a warning
(:func:`workload_warning`).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Sequence
from typing import Any

from harness.analysis.frontier import frontier_auc
from harness.analysis.groups import SeriesPoint, series_points
from harness.identity import workload_differences, workload_identity
from harness.results import METRICS, MetricSpec, Run
from harness.text import fmt_number

DEFAULT_TOLERANCE = 0.02  # relative change below which two values are called the same

# Whole-curve scalars over a run's valid points (repeats reduced): they survive one noisy point.
CURVE_METRICS: dict[str, MetricSpec] = {
    "frontier_auc": MetricSpec(
        "Frontier AUC (blog definition)",
        "tok/s/user x tok/s/GPU",
        "higher",
        "Area under the Pareto frontier of interactivity vs total-token throughput per GPU.",
    ),
    "frontier_auc_bench_sweep": MetricSpec(
        "Frontier AUC (bench sweep definition)",
        "tok/s/user x tok/s/GPU",
        "higher",
        "Area under the frontier of output tok/s per user vs output throughput per GPU.",
    ),
    "max_throughput_per_gpu": MetricSpec(
        "Best total-token throughput per GPU",
        "tok/s/GPU",
        "higher",
        "Max over valid points.",
    ),
    "max_occupancy": MetricSpec(
        "Most requests running",
        "requests",
        "higher",
        "Max over valid points of the mean non-zero running requests (the blog's headline).",
    ),
}


def verdict(
    metric: str, a: float | None, b: float | None, tolerance: float = DEFAULT_TOLERANCE
) -> str:
    """better / worse / same / info / n/a for B against A on `metric`."""
    if a is None or b is None:
        return "n/a"
    direction = (METRICS.get(metric) or CURVE_METRICS[metric]).better
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


def compare_points(
    a: SeriesPoint | None, b: SeriesPoint | None, tolerance: float = DEFAULT_TOLERANCE
) -> list[dict[str, Any]]:
    """Rows for one matched point (either side may be missing)."""
    ref = a or b
    assert ref is not None
    rows = []
    for key, spec in METRICS.items():
        va = a.values.get(key) if a else None
        vb = b.values.get(key) if b else None
        row = _row((ref.label, ref.parallel, ref.number), key, spec, va, vb)
        row["verdict"] = "missing" if a is None or b is None else verdict(key, va, vb, tolerance)
        row["a_valid"] = None if a is None else a.valid
        row["b_valid"] = None if b is None else b.valid
        row["a_repeats"] = None if a is None else a.repeats
        row["b_repeats"] = None if b is None else b.repeats
        rows.append(row)
    return rows


def _row(
    where: tuple[str, int | None, int | None],
    metric: str,
    spec: MetricSpec,
    a: float | None,
    b: float | None,
) -> dict[str, Any]:
    """The fields every comparison row has: which point, which metric, A, B, delta, ratio."""
    point, parallel, number = where
    return {
        "point": point,
        "parallel": parallel,
        "number": number,
        "metric": metric,
        "label": spec.label,
        "unit": spec.unit,
        "better": spec.better,
        "a": a,
        "b": b,
        "delta": None if a is None or b is None else b - a,
        "ratio": _ratio(a, b),
    }


def workload_warning(a: Run, b: Run) -> str | None:
    """A warning when A and B did not send the same workload (not like for like), else None."""
    wa = workload_identity(a.manifest.model_dump(mode="json"))
    wb = workload_identity(b.manifest.model_dump(mode="json"))
    if wa == wb:
        return None
    return (
        f"warning: {a.name} and {b.name} have different workloads, so the comparison is not "
        "like for like (" + "; ".join(workload_differences(wa, wb)) + ")"
    )


def compare_runs(a: Run, b: Run, *, tolerance: float = DEFAULT_TOLERANCE) -> list[dict[str, Any]]:
    """Per point x metric rows of B against A (see module doc), in sweep order."""
    left = {(p.parallel, p.number): p for p in series_points(a)}
    right = {(p.parallel, p.number): p for p in series_points(b)}
    rows: list[dict[str, Any]] = []
    for key in sorted(set(left) | set(right)):
        rows.extend(compare_points(left.get(key), right.get(key), tolerance))
    return rows


def curve_values(run: Run) -> dict[str, float | None]:
    """The CURVE_METRICS of one run, from its valid points."""
    points = [p for p in series_points(run) if p.valid]

    def pairs(x: str, y: str) -> list[tuple[float, float]]:
        return [
            (vx, vy)
            for p in points
            if (vx := p.values.get(x)) is not None and (vy := p.values.get(y)) is not None
        ]

    def best(key: str) -> float | None:
        values = [v for p in points if (v := p.values.get(key)) is not None]
        return max(values) if values else None

    return {
        "frontier_auc": frontier_auc(pairs("interactivity", "throughput_per_gpu")),
        "frontier_auc_bench_sweep": frontier_auc(
            pairs("output_tps_per_user", "output_throughput_per_gpu")
        ),
        "max_throughput_per_gpu": best("throughput_per_gpu"),
        "max_occupancy": best("occupancy"),
    }


def compare_curves(a: Run, b: Run, *, tolerance: float = DEFAULT_TOLERANCE) -> list[dict[str, Any]]:
    """One row per CURVE_METRICS key, B against A (same fields as the point rows)."""
    left, right = curve_values(a), curve_values(b)
    rows = []
    for key, spec in CURVE_METRICS.items():
        va, vb = left[key], right[key]
        row = _row(("curve", None, None), key, spec, va, vb)
        row["verdict"] = verdict(key, va, vb, tolerance)
        row.update(a_valid=True, b_valid=True, a_repeats=None, b_repeats=None)
        rows.append(row)
    return rows


_fmt = functools.partial(fmt_number, digits=6, sci_below=1e-3, sci_from=1e7)


MARKS = {
    "better": "better ▲",
    "worse": "WORSE ▼",
    "same": "same",
    "info": "",
    "n/a": "",
    "missing": "missing",
}


def render_table(
    rows: Sequence[dict[str, Any]],
    a_name: str,
    b_name: str,
    *,
    include_empty: bool = False,
    tolerance: float = DEFAULT_TOLERANCE,
) -> str:
    """A plain-text table, one block per point; metrics missing on both sides are skipped."""
    legend = (
        "ratio = B/A; better/worse by each metric's direction (higher/lower is better), "
        f"same within {tolerance:.0%}"
    )
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
            title = (
                f"{row['point']} (parallel {row['parallel']}, {row['number']} conversations)"
                if row["parallel"] is not None
                else "whole curve (valid points)"
            )
            lines.append(title + (f"  [{', '.join(flags)}]" if flags else ""))
        if not include_empty and row["a"] is None and row["b"] is None:
            continue
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.3f}x"
        table.append(
            (
                f"{row['label']} ({row['unit']})",
                row["better"] or "-",
                _fmt(row["a"]),
                _fmt(row["b"]),
                _fmt(row["delta"]),
                ratio,
                MARKS.get(row["verdict"], ""),
            )
        )
    flush()
    return "\n".join(lines).rstrip() + "\n"


def compare_json(
    a: Run,
    b: Run,
    rows: Sequence[dict[str, Any]],
    tolerance: float = DEFAULT_TOLERANCE,
    curves: Sequence[dict[str, Any]] = (),
) -> str:
    return (
        json.dumps(
            {
                "a": a.name,
                "b": b.name,
                "a_dir": str(a.root),
                "b_dir": str(b.root),
                "tolerance": tolerance,
                "rows": list(rows),
                "curves": list(curves),
            },
            indent=2,
        )
        + "\n"
    )
