"""Prediction-interval bands: a simulated point's 80 % interval from its calibration's parameter
uncertainty (`point.json` `fidelity.interval80`, docs/simulator.md §6), drawn as a shaded band
in the series' colour around its sweep-order line and its occupancy bars.

Per configured point the interval is taken over the same repeats its median is (the valid ones,
else all): the median of their lower ends and of their upper ends. A point without an interval
for a metric (a real run, an uncalibrated simulation, a metric the calibration has no sigma for)
leaves the band out where it would need it.

On the throughput-per-GPU-against-interactivity panel the band joins every point's two corners
(both lows, both highs): a slower or faster step moves both together. Hover on a vertex gives
that point's intervals. On the occupancy panel each bar carries a shaded box from its
interval's low to its high.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.colors import hex_to_rgb

from harness.analysis.groups import Key, SeriesPoint, finite, group_by_point
from harness.results import METRICS, PointRecord, Run

Interval = tuple[float, float]
BAND_ALPHA = 0.25
BAND_EDGE = "rgba(40,40,40,0.6)"  # the box's low end shows over its own bar


def interval_of(record: PointRecord, metric: str) -> Interval | None:
    """The record's 80 % interval of `metric` (None: none, or not a [low, high] pair)."""
    bounds = (record.fidelity.get("interval80") or {}).get(metric)
    if not isinstance(bounds, list | tuple) or len(bounds) != 2:
        return None
    low, high = finite(bounds[0]), finite(bounds[1])
    return (low, high) if low is not None and high is not None and low <= high else None


def point_intervals(run: Run) -> dict[Key, dict[str, Interval]]:
    """Each configured point's 80 % interval per metric (only points that carry one)."""
    out: dict[Key, dict[str, Interval]] = {}
    for key, records in group_by_point(run.points).items():
        used = [r for r in records if r.valid] or records
        found: dict[str, Interval] = {}
        for metric in METRICS:
            pairs = [b for r in used if (b := interval_of(r, metric)) is not None]
            if pairs:
                found[metric] = (
                    statistics.median(low for low, _ in pairs),
                    statistics.median(high for _, high in pairs),
                )
        if found:
            out[key] = found
    return out


def _fill(color: str) -> str:
    if not color.startswith("#"):
        return color  # a named colour: the band takes it as given, with the trace's opacity
    red, green, blue = hex_to_rgb(color)
    return f"rgba({red},{green},{blue},{BAND_ALPHA})"


def _text(point: SeriesPoint, bands: dict[str, Interval], series_name: str) -> str:
    lines = [f"<b>{series_name}</b>", f"{point.label}: 80 % prediction interval"]
    for metric, (low, high) in bands.items():
        spec = METRICS[metric]
        lines.append(f"{spec.label}: {low:.4g} – {high:.4g} {spec.unit}")
    return "<br>".join(lines)


def _trace(xs: list[Any], ys: list[float], texts: list[str], color: str, **kw: Any) -> go.Scatter:
    return go.Scatter(
        x=xs,
        y=ys,
        mode="lines",
        fill="toself",
        fillcolor=_fill(color),
        line={"width": 0, "color": color},
        hovertext=texts,
        hoverinfo="text",
        hoveron="points",
        showlegend=False,
        **kw,
    )


def pareto_band(
    points: Sequence[SeriesPoint],
    intervals: dict[Key, dict[str, Interval]],
    xk: str,
    yk: str,
    *,
    color: str,
    name: str,
    meta: dict[str, Any],
) -> go.Scatter | None:
    """The band around the sweep-order line (points in sweep order), or None when no point has
    both axes' intervals: out through every (x high, y high), back through (x low, y low)."""
    placed = [
        (p, bands)
        for p in points
        if xk in (bands := intervals.get((p.parallel, p.number), {})) and yk in bands
    ]
    if not placed:
        return None
    upper = [(b[xk][1], b[yk][1]) for _, b in placed]
    lower = [(b[xk][0], b[yk][0]) for _, b in placed][::-1]
    texts = [_text(p, b, name) for p, b in placed]
    return _trace(
        [x for x, _ in upper + lower],
        [y for _, y in upper + lower],
        texts + texts[::-1],
        color,
        name=f"{name} · 80 % interval",
        meta={**meta, "role": "band"},
    )


def occupancy_band(
    points: Sequence[SeriesPoint],
    intervals: dict[Key, dict[str, Interval]],
    *,
    color: str,
    name: str,
    meta: dict[str, Any],
    offsetgroup: str,
) -> go.Bar | None:
    """Over each occupancy bar (same `offsetgroup`, so the same slot in its category), a shaded
    box from the interval's low to its high; None when no point has one."""
    placed = [
        (p, bands["occupancy"])
        for p in points
        if "occupancy" in (bands := intervals.get((p.parallel, p.number), {}))
    ]
    if not placed:
        return None
    return go.Bar(
        x=[str(p.parallel) for p, _ in placed],
        y=[high - low for _, (low, high) in placed],
        base=[low for _, (low, _high) in placed],
        offsetgroup=offsetgroup,
        name=f"{name} · occupancy 80 % interval",
        marker={"color": _fill(color), "line": {"color": BAND_EDGE, "width": 1}},
        hovertext=[_text(p, {"occupancy": band}, name) for p, band in placed],
        hoverinfo="text",
        showlegend=False,
        meta={**meta, "role": "occupancy-band"},
    )
