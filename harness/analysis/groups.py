"""The one point-group model: a run's points grouped by (parallel, number), repeats reduced.

A *configured point* is one (parallel, number) of a sweep; ``--repeats N`` runs it N times.
Everything downstream of a run sees configured points through this module:

- :func:`group_by_point` - the grouping itself (sorted by parallel, then number);
- :class:`SeriesPoint` / :func:`series_points` - a point reduced for display and comparison
  (figures, dashboard, compare): median and median CI (`harness.analysis.stats.median_ci`) of
  every finite metric over the valid repeats, or over the invalid ones (flagged) when none is
  valid;
- :func:`repeat_aggregates` - the rows of ``summary.json``'s ``aggregates`` and
  ``summary_repeats.csv`` (median and CI over the valid repeats, per metric);
- :class:`PointValues` / :func:`point_rows` / :func:`group_rows` - the gate's unreduced view (the
  valid repeats' metrics and the invalid repeats' reasons), built from a run or from the
  compact rows the history stores, so that a verdict can compute its own CI and curves.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from harness.analysis.stats import median_ci
from harness.results import METRICS, PointRecord, Run, point_id

Key = tuple[int, int]  # (parallel, number)
T = TypeVar("T")


def _record_key(record: PointRecord) -> Key:
    return (record.parallel, record.number)


def group_by_point(
    items: Iterable[T],
    key: Callable[[T], Key] = _record_key,  # type: ignore[assignment]  # the default is for T = PointRecord; mypy cannot bind a default to T
) -> dict[Key, list[T]]:
    """Items (point records by default) grouped by (parallel, number), keys in sorted order."""
    groups: dict[Key, list[T]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return {k: groups[k] for k in sorted(groups)}


def finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number, else None."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


# --------------------------------------------------------------------------- reduced points


@dataclass
class SeriesPoint:
    """One configured point of a series; repeats reduced to their median."""

    label: str
    parallel: int
    number: int
    values: dict[str, float | None]
    ci: dict[str, tuple[float, float]] = field(default_factory=dict)  # (low, high) per metric
    repeats: int = 1
    valid: bool = True
    invalid_reasons: list[str] = field(default_factory=list)
    point_ids: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)  # invalid repeats left out of the median


def _invalid_reasons(records: Sequence[PointRecord]) -> list[str]:
    reasons: list[str] = []
    for r in records:
        if r.valid:
            continue
        for reason in r.invalid_reasons or ["invalid"]:
            text = f"{r.point_id}: {reason}" if len(records) > 1 else reason
            if text not in reasons:
                reasons.append(text)
    return reasons


def reduce_repeats(records: Sequence[PointRecord]) -> SeriesPoint:
    """Median (and CI when >1 value) of every metric over the valid repeats of one point.

    When no repeat is valid the invalid ones are reduced instead and the point is marked
    invalid with every reason, so it can still be shown (flagged) rather than vanish.
    """
    first = records[0]
    valid = [r for r in records if r.valid]
    used = valid or list(records)
    values: dict[str, float | None] = {}
    ci: dict[str, tuple[float, float]] = {}
    for key in METRICS:
        data = [v for r in used if (v := finite(r.metrics.get(key))) is not None]
        if not data:
            values[key] = None
            continue
        median, low, high = median_ci(data)
        values[key] = median
        if len(data) > 1:
            ci[key] = (low, high)
    reasons = _invalid_reasons(records)
    return SeriesPoint(
        label=first.label or f"c{first.parallel}",
        parallel=first.parallel,
        number=first.number,
        values=values,
        ci=ci,
        repeats=len(used),
        valid=bool(valid),
        invalid_reasons=[] if valid else reasons,
        excluded=reasons if valid else [],
        point_ids=[r.point_id for r in records],
    )


def series_points(run: Run) -> list[SeriesPoint]:
    """The run's points grouped by (parallel, number) in sweep order, repeats reduced."""
    return [reduce_repeats(group) for group in group_by_point(run.points).values()]


def repeat_aggregates(points: Sequence[PointRecord]) -> list[dict[str, Any]]:
    """Per (parallel, number): median and CI of every metric over the valid repeats.

    The rows of ``summary.json``'s ``aggregates`` (``repro sweep --repeats N``); unlike
    :func:`reduce_repeats`, a point without a valid repeat has null metrics.
    """
    rows = []
    for (parallel, number), members in group_by_point(points).items():
        valid = [p for p in members if p.valid]
        row: dict[str, Any] = {
            "point": point_id(parallel, number, 0)[:-3],
            "label": members[0].label,
            "parallel": parallel,
            "number": number,
            "repeats": len(members),
            "valid_repeats": len(valid),
        }
        for key in METRICS:
            values = [v for p in valid if (v := p.metrics.get(key)) is not None]
            if values:
                med, low, high = median_ci(values)
                row[key], row[f"{key}_ci_low"], row[f"{key}_ci_high"] = med, low, high
            else:
                row[key] = row[f"{key}_ci_low"] = row[f"{key}_ci_high"] = None
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- the gate's view


@dataclass
class PointValues:
    """One (parallel, number) of a run: its valid repeats' metrics, reduced on demand."""

    label: str
    parallel: int
    number: int
    repeats: list[dict[str, float | None]] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)  # reasons of invalid repeats

    def values(self, metric: str) -> list[float]:
        return [float(v) for r in self.repeats if (v := r.get(metric)) is not None]

    def median(self, metric: str) -> float | None:
        values = self.values(metric)
        return statistics.median(values) if values else None


def point_rows(run: Run) -> list[dict[str, Any]]:
    """Per-point records in the compact form the history stores."""
    return [
        {
            "label": p.label,
            "parallel": p.parallel,
            "number": p.number,
            "repeat": p.repeat,
            "valid": p.valid,
            "invalid_reasons": list(p.invalid_reasons),
            "metrics": dict(p.metrics),
        }
        for p in run.points
    ]


def _row_key(row: dict[str, Any]) -> Key:
    return (int(row["parallel"]), int(row["number"]))


def group_rows(rows: Iterable[dict[str, Any]]) -> dict[Key, PointValues]:
    """:func:`point_rows`-shaped rows as one :class:`PointValues` per configured point."""
    points: dict[Key, PointValues] = {}
    for key, members in group_by_point(rows, _row_key).items():
        pv = points[key] = PointValues(members[0]["label"], key[0], key[1])
        for row in members:
            if row["valid"]:
                pv.repeats.append(dict(row["metrics"]))
            else:
                reasons = "; ".join(row.get("invalid_reasons") or []) or "invalid"
                pv.invalid.append(f"repeat {row.get('repeat', 0)}: {reasons}")
    return points
