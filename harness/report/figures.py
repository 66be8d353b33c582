"""The blog's two-panel figure (Pareto + occupancy) for one or many runs, in Plotly.

Top panel: interactivity (x) against throughput per GPU (y); per series a faint line through all
points in sweep order, a bold line through the Pareto frontier (`harness.analysis.frontier`), points
labelled c1…c32 with labels merged where points overlap. Bottom panel: mean running requests per
configured concurrency (categorical) with one-decimal value labels.

Two definitions (docs/metrics.md):

* ``blog``: 1000 / mean TPOT against logical total-token throughput per GPU (the default);
* ``bench-sweep``: vLLM ``bench sweep``'s output tok/s per user (output throughput / configured
  concurrency) against output-token throughput per GPU.

Repeated points (same parallel and number) are drawn as the median with the median's
distribution-free confidence interval (`harness.analysis.stats.median_ci`) as error bars.
Invalid points are drawn as hollow crosses with their reasons on hover, and never join a line
or the frontier.

A simulated series whose points carry the calibration's 80 % prediction intervals
(`harness.report.bands`) has a shaded band in its colour on both panels (roles ``band`` and
``occupancy-band``), grouped with its series in the legend.

Every trace carries ``meta = {"series", "role", "published"}`` so that tests and the dashboard
can find traces without depending on their display names.
"""

from __future__ import annotations

import html
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from harness.analysis.frontier import frontier_mask, frontier_path
from harness.analysis.groups import SeriesPoint, finite
from harness.errors import ConfigError
from harness.report.bands import occupancy_band, pareto_band
from harness.report.series import Series, figure_title, footnote, load_published, run_series
from harness.results import METRICS, Run

DEFINITIONS: dict[str, dict[str, str]] = {
    "blog": {
        "x": "interactivity",
        "y": "throughput_per_gpu",
        "x_title": "Interactivity: tokens/s/user = 1000 / mean TPOT (ms) →",
        "y_title": "Logical total-token throughput per GPU (tokens/s) →",
        "subtitle": "blog definition (InferenceX): 1000/mean TPOT vs total tok/s per GPU",
    },
    "bench-sweep": {
        "x": "output_tps_per_user",
        "y": "output_throughput_per_gpu",
        "x_title": "Output tokens/s per user = output throughput ÷ configured concurrency →",
        "y_title": "Output-token throughput per GPU (tokens/s) →",
        "subtitle": "vLLM bench sweep definition: output tok/s per user vs output tok/s per GPU",
    },
}

# The blog's series styles, in its order; further series cycle through them.
STYLES: tuple[tuple[str, str], ...] = (
    ("#1b9e9e", "circle"),
    ("#3b6fd6", "triangle-up"),
    ("#7b4fa0", "square"),
    ("#e08a1e", "diamond"),
    ("#c0392b", "pentagon"),
    ("#2e7d32", "hexagon"),
)

# Points closer than this fraction of both axis spans share one merged label ("c24/c32").
LABEL_MERGE_FRACTION = 0.012


# --------------------------------------------------------------------------- figure


def _escape(text: str) -> str:
    # Plotly renders a subset of HTML in names and text; show user strings literally.
    return html.escape(text, quote=False)


def _merged_labels(
    xs: list[float | None], ys: list[float | None], labels: list[str], span_x: float, span_y: float
) -> list[str]:
    """Labels with overlapping points merged: the first of a cluster shows "c24/c32"."""
    out = [""] * len(labels)
    taken = [False] * len(labels)
    for i in range(len(labels)):
        xi, yi = xs[i], ys[i]
        if taken[i] or xi is None or yi is None:
            continue
        cluster = [i]
        for j in range(i + 1, len(labels)):
            xj, yj = xs[j], ys[j]
            if taken[j] or xj is None or yj is None:
                continue
            if (
                abs(xj - xi) <= LABEL_MERGE_FRACTION * span_x
                and abs(yj - yi) <= LABEL_MERGE_FRACTION * span_y
            ):
                cluster.append(j)
        for j in cluster:
            taken[j] = True
        out[i] = "/".join(labels[j] for j in cluster)
    return out


def _error(points: list[SeriesPoint], key: str) -> dict[str, Any] | None:
    if not any(key in p.ci for p in points):
        return None
    plus, minus = [], []
    for p in points:
        value, bounds = p.values.get(key), p.ci.get(key)
        if value is None or bounds is None:
            plus.append(0.0)
            minus.append(0.0)
        else:
            plus.append(max(bounds[1] - value, 0.0))
            minus.append(max(value - bounds[0], 0.0))
    return {
        "type": "data",
        "symmetric": False,
        "array": plus,
        "arrayminus": minus,
        "thickness": 1.2,
        "width": 3,
    }


def _hover(point: SeriesPoint, series: Series, xk: str, yk: str) -> str:
    where = f"{point.label} (parallel {point.parallel}, {point.number} conversations)"
    lines = [f"<b>{_escape(series.name)}</b>", where]
    for key in (xk, yk, "occupancy"):
        value = point.values.get(key)
        if value is not None:
            spec = METRICS[key]
            bounds = point.ci.get(key)
            ci = f" [{bounds[0]:.4g}, {bounds[1]:.4g}]" if bounds else ""
            lines.append(f"{spec.label}: {value:.4g}{ci} {spec.unit}")
    if point.repeats > 1:
        lines.append(f"median of {point.repeats} repeats, 95% CI in brackets")
    if not point.valid:
        lines.append("INVALID: " + _escape("; ".join(point.invalid_reasons)))
    if point.excluded:
        lines.append("excluded repeats: " + _escape("; ".join(point.excluded)))
    return "<br>".join(lines)


def _published_visible(runs: Sequence[Run], published: list[Series], yk: str) -> bool:
    """Published values are drawn visibly unless the runs are CPU runs or their best throughput
    is >10x below the published best (the runs would be squashed into the origin)."""
    if runs and all(int(run.manifest.profile.get("gpus") or 0) == 0 for run in runs):
        return False
    mine = [v for run in runs for p in run.points if (v := finite(p.metrics.get(yk)))]
    theirs = [v for s in published for p in s.points if (v := p.values.get(yk))]
    if not mine or not theirs:
        return True
    return max(mine) * 10 >= max(theirs)


@dataclass(frozen=True)
class _Style:
    """How one series is drawn: its colour and marker, the axes' keys and spans."""

    color: str
    marker: str
    xk: str
    yk: str
    span_x: float
    span_y: float
    visible: bool | str


def _check_definition(definition: str) -> dict[str, str]:
    if definition not in DEFINITIONS:
        raise ConfigError(
            f"unknown figure definition {definition!r}; choose one of {', '.join(DEFINITIONS)}"
        )
    return DEFINITIONS[definition]


def _spans(series: Sequence[Series], xk: str, yk: str) -> tuple[float, float]:
    """Axis spans (from 0 or the lowest value) that decide which labels merge."""
    points = [(p.values.get(xk), p.values.get(yk)) for s in series for p in s.points]
    xs = [x for x, _ in points if x is not None]
    ys = [y for _, y in points if y is not None]
    span_x = (max(xs) - min(min(xs), 0.0)) if xs else 1.0
    span_y = (max(ys) - min(min(ys), 0.0)) if ys else 1.0
    return span_x, span_y


def pareto_figure(
    runs: Sequence[Run],
    *,
    published: bool = True,
    definition: str = "blog",
    title: str | None = None,
    published_visible: bool | None = None,
    published_path: Path | None = None,
) -> go.Figure:
    """The two-panel figure for `runs` (one series each), published MTP3 arms overlaid.

    `published_visible=None` shows the published traces unless the runs are CPU runs or their
    throughput is more than 10x below them; hidden traces stay in the legend (click to show).
    """
    spec = _check_definition(definition)
    xk, yk = spec["x"], spec["y"]
    mine = run_series(runs)
    reference: list[Series] = []
    if published and definition == "blog":  # the blog published only its own definition
        _, reference = load_published(published_path)
    visible_ref = (
        published_visible
        if published_visible is not None
        else _published_visible(runs, reference, yk)
    )
    fig = make_subplots(
        rows=2,
        cols=1,
        row_heights=[0.66, 0.34],
        vertical_spacing=0.12,
        subplot_titles=(
            "Interactivity vs throughput per GPU (" + spec["subtitle"] + ")",
            "Requests actually running during each point",
        ),
    )
    span_x, span_y = _spans([*mine, *(reference if visible_ref else [])], xk, yk)
    for index, series in enumerate(mine):
        color, marker = STYLES[index % len(STYLES)]
        _add_series(fig, series, _Style(color, marker, xk, yk, span_x, span_y, True))
    for series in reference:
        style = _Style(
            series.color or "#888888",
            series.marker or "circle",
            *(xk, yk, span_x, span_y),
            True if visible_ref else "legendonly",
        )
        _add_series(fig, series, style)
    categories = sorted({p.parallel for s in [*mine, *reference] for p in s.points})
    _axes(fig, spec, categories)
    note = footnote(runs, definition) if runs else ""
    if any(s.intervals for s in mine):
        note += " Shaded: a simulated series' 80 % prediction interval (its calibration's fit)."
    if reference and not visible_ref:
        note += (
            " Published values (8× H200) are far above this run's scale:"
            " click them in the legend to show."
        )
    elif published and definition != "blog":
        note += " The blog published only its own definition; no published overlay here."
    _layout(fig, title or (figure_title(runs) if runs else "published reference"), definition, note)
    if not any(
        p.values.get(xk) is not None and p.values.get(yk) is not None
        for s in mine
        for p in s.points
    ):
        fig.add_annotation(
            text=f"no point of these runs has {xk} and {yk}",
            xref="x domain",
            yref="y domain",
            x=0.5,
            y=0.5,
            showarrow=False,
            font={"size": 14, "color": "#b00020"},
        )
    return fig


def _axes(fig: go.Figure, spec: dict[str, str], categories: list[int]) -> None:
    fig.update_xaxes(title_text=spec["x_title"], rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text=spec["y_title"], rangemode="tozero", row=1, col=1)
    fig.update_xaxes(
        title_text="Configured concurrency",
        type="category",
        categoryorder="array",
        categoryarray=[str(c) for c in categories],
        row=2,
        col=1,
    )
    fig.update_yaxes(title_text="Mean requests running", rangemode="tozero", row=2, col=1)


def _layout(fig: go.Figure, title: str, definition: str, note: str) -> None:
    fig.update_layout(
        title={"text": _escape(title), "x": 0.01},
        barmode="group",
        template="plotly_white",
        height=880,
        margin={"t": 80, "b": 130},
        legend={"x": 1.02, "y": 1, "xanchor": "left", "font": {"size": 11}},
        meta={"definition": definition, "footnote": note},
    )
    if note:
        lines = textwrap.wrap(_escape(note), 150, break_long_words=False, break_on_hyphens=False)
        fig.add_annotation(
            text="<br>".join(lines),
            xref="paper",
            yref="paper",
            x=0,
            y=-0.085,
            showarrow=False,
            align="left",
            font={"size": 11, "color": "#555"},
            xanchor="left",
            yanchor="top",
        )


def _add_series(fig: go.Figure, series: Series, style: _Style) -> None:
    """The series' traces: sweep-order line, frontier, points, invalid points, occupancy bars."""
    xk, yk = style.xk, style.yk
    placed = [
        p for p in series.points if p.values.get(xk) is not None and p.values.get(yk) is not None
    ]
    ok = [p for p in placed if p.valid]
    bad = [p for p in placed if not p.valid]
    common = {
        "legendgroup": f"{'pub' if series.published else 'run'}:{series.name}",
        "visible": style.visible,
    }
    meta = {"series": series.name, "published": series.published}
    name = _escape(series.name)
    band = pareto_band(ok, series.intervals, xk, yk, color=style.color, name=name, meta=meta)
    if band is not None:  # under the lines: a simulated series' 80 % prediction interval
        fig.add_trace(band.update(**common), row=1, col=1)
    for trace in _line_traces(series, ok, style):
        fig.add_trace(trace.update(**common), row=1, col=1)
    fig.add_trace(_points_trace(series, ok, style, meta).update(**common), row=1, col=1)
    if bad:
        fig.add_trace(_invalid_trace(series, bad, style, meta).update(**common), row=1, col=1)
    fig.add_trace(_occupancy_trace(series, style, meta).update(**common), row=2, col=1)
    valid = [p for p in series.points if p.valid]
    box = occupancy_band(
        valid, series.intervals, color=style.color, name=name, meta=meta, offsetgroup=series.name
    )
    if box is not None:
        fig.add_trace(box.update(**common), row=2, col=1)


def _line_traces(series: Series, ok: list[SeriesPoint], style: _Style) -> list[go.Scatter]:
    """The faint line in sweep order and the bold line through the frontier."""
    name = _escape(series.name)
    xs = [p.values[style.xk] for p in ok]
    ys = [p.values[style.yk] for p in ok]
    meta = {"series": series.name, "published": series.published}
    dash = "dot" if series.published else "solid"
    order = frontier_path(list(zip(xs, ys, strict=True)))
    sweep = go.Scatter(
        x=xs,
        y=ys,
        mode="lines",
        name=f"{name} · sweep order",
        line={"color": style.color, "width": 1, "dash": dash},
        opacity=0.35,
        hoverinfo="skip",
        showlegend=False,
        meta={**meta, "role": "sweep"},
    )
    frontier = go.Scatter(
        x=[xs[i] for i in order],
        y=[ys[i] for i in order],
        mode="lines",
        name=f"{name} · Pareto frontier",
        line={"color": style.color, "width": 3.2, "dash": dash},
        hoverinfo="skip",
        showlegend=False,
        meta={**meta, "role": "frontier"},
    )
    return [sweep, frontier]


def _points_trace(
    series: Series, ok: list[SeriesPoint], style: _Style, meta: dict[str, Any]
) -> go.Scatter:
    xk, yk, color = style.xk, style.yk, style.color
    xs = [p.values[xk] for p in ok]
    ys = [p.values[yk] for p in ok]
    on_frontier = frontier_mask(list(zip(xs, ys, strict=True)))
    return go.Scatter(
        x=xs,
        y=ys,
        mode="markers+text",
        name=_escape(series.name),
        text=_merged_labels(xs, ys, [p.label for p in ok], style.span_x, style.span_y),
        textposition="top right",
        textfont={"size": 11, "color": color},
        marker={
            "color": "white" if series.published else color,
            "symbol": style.marker,
            "size": 10,
            "line": {"color": color, "width": 2},
        },
        error_x=_error(ok, xk),
        error_y=_error(ok, yk),
        hovertext=[_hover(p, series, xk, yk) for p in ok],
        hoverinfo="text",
        customdata=[
            [p.label, ",".join(p.point_ids), on] for p, on in zip(ok, on_frontier, strict=True)
        ],
        meta={**meta, "role": "points"},
    )


def _invalid_trace(
    series: Series, bad: list[SeriesPoint], style: _Style, meta: dict[str, Any]
) -> go.Scatter:
    return go.Scatter(
        x=[p.values[style.xk] for p in bad],
        y=[p.values[style.yk] for p in bad],
        mode="markers+text",
        name=f"{_escape(series.name)} · invalid",
        text=[f"{p.label} ✗" for p in bad],
        textposition="bottom right",
        textfont={"size": 10, "color": "#b00020"},
        marker={
            "color": "rgba(0,0,0,0)",
            "symbol": "x-open",
            "size": 12,
            "line": {"color": "#b00020", "width": 2},
        },
        hovertext=[_hover(p, series, style.xk, style.yk) for p in bad],
        hoverinfo="text",
        meta={**meta, "role": "invalid"},
    )


def _occupancy_trace(series: Series, style: _Style, meta: dict[str, Any]) -> go.Bar:
    color = style.color
    occ = [p for p in series.points if p.values.get("occupancy") is not None]
    return go.Bar(
        x=[str(p.parallel) for p in occ],
        y=[p.values["occupancy"] for p in occ],
        name=_escape(series.name),
        text=[f"{p.values['occupancy']:.1f}" + ("" if p.valid else " ✗") for p in occ],
        textposition="outside",
        cliponaxis=False,
        showlegend=False,
        marker={
            "color": color,
            "opacity": 0.45 if series.published else 0.9,
            "pattern": {"shape": "/" if series.published else ""},
            "line": {
                "color": ["#b00020" if not p.valid else color for p in occ],
                "width": [2.5 if not p.valid else 0.5 for p in occ],
            },
        },
        error_y=_error(occ, "occupancy"),
        hovertext=[_hover(p, series, style.xk, style.yk) for p in occ],
        hoverinfo="text",
        offsetgroup=series.name,  # its interval box (report/bands.py) shares its slot
        meta={**meta, "role": "occupancy"},
    )


def traces_by_role(fig: go.Figure, role: str, *, published: bool | None = None) -> list[Any]:
    """The figure's traces with meta role `role` (optionally only (non-)published ones)."""
    out = []
    for trace in fig.data:
        meta = trace.meta if isinstance(trace.meta, dict) else {}
        if meta.get("role") == role and (published is None or meta.get("published") == published):
            out.append(trace)
    return out
