"""The blog's two-panel figure (Pareto + occupancy) for one or many runs, in Plotly.

Top panel: interactivity (x) against throughput per GPU (y); per series a faint line through all
points in sweep order, a bold line through the Pareto frontier (`harness.analysis.frontier`), points
labelled c1…c32 with labels merged where points overlap. Bottom panel: mean running requests per
configured concurrency (categorical) with one-decimal value labels.

Two definitions (DESIGN.md, "Interactivity has two definitions"):

* ``blog``: 1000 / mean TPOT against logical total-token throughput per GPU (the default);
* ``bench-sweep``: vLLM ``bench sweep``'s output tok/s per user (output throughput / configured
  concurrency) against output-token throughput per GPU.

Repeated points (same parallel and number) are drawn as the median with the median's
distribution-free confidence interval (`harness.analysis.stats.median_ci`) as error bars. Invalid points
are drawn as hollow crosses with their reasons on hover, and never join a line or the frontier.

Every trace carries ``meta = {"series", "role", "published"}`` so that tests and the dashboard
can find traces without depending on their display names.
"""

from __future__ import annotations

import html
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import yaml
from plotly.subplots import make_subplots

from harness.analysis.frontier import frontier_mask, frontier_path
from harness.analysis.stats import median_ci
from harness.errors import ConfigError
from harness.paths import LAUNCH_DIR
from harness.results import METRICS, PointRecord, Run

PUBLISHED_FILE = LAUNCH_DIR / "published" / "glm53-blog.yaml"

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


# --------------------------------------------------------------------------- series data


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


@dataclass
class Series:
    name: str
    points: list[SeriesPoint]
    published: bool = False
    build: str | None = None
    color: str | None = None
    marker: str | None = None
    run: Run | None = None


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


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
        data = [v for r in used if (v := _finite(r.metrics.get(key))) is not None]
        if not data:
            values[key] = None
            continue
        median, low, high = median_ci(data)
        values[key] = median
        if len(data) > 1:
            ci[key] = (low, high)
    reasons: list[str] = []
    for r in records:
        if r.valid:
            continue
        for reason in r.invalid_reasons or ["invalid"]:
            text = f"{r.point_id}: {reason}" if len(records) > 1 else reason
            if text not in reasons:
                reasons.append(text)
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
    groups: dict[tuple[int, int], list[PointRecord]] = {}
    for record in run.points:
        groups.setdefault((record.parallel, record.number), []).append(record)
    return [reduce_repeats(groups[key]) for key in sorted(groups)]


def build_label(build: dict[str, Any] | None) -> str | None:
    """A short build identifier from build provenance (commit if known, else name/version)."""
    if not build:
        return None
    for key in ("commit", "requested_commit", "vllm_commit", "git_commit", "sha"):
        value = build.get(key)
        if isinstance(value, str) and value and value != "latest":
            return value[:10]
    for key in ("build", "name", "vllm_version_output", "version"):
        value = build.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def run_series(runs: Sequence[Run]) -> list[Series]:
    """One series per run, named by run id (profile name added when it differs)."""
    out = []
    for run in runs:
        manifest = run.manifest
        name = manifest.run_id
        if manifest.profile_name and manifest.profile_name not in name:
            name = f"{name} ({manifest.profile_name})"
        if manifest.engine == "sim":
            name = f"{name} · simulated"
        out.append(
            Series(name=name, points=series_points(run), build=build_label(manifest.build), run=run)
        )
    return out


def load_published(path: Path | None = None) -> tuple[dict[str, Any], list[Series]]:
    """The published reference file and its series (labelled as published)."""
    path = path or PUBLISHED_FILE
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: published reference file missing") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    allowed_top = {
        "name",
        "title",
        "source",
        "uncertainty",
        "definitions",
        "gpus",
        "workload",
        "series",
    }
    if not isinstance(data, dict) or not isinstance(data.get("series"), list):
        raise ConfigError(f"{path}: expected a mapping with a 'series' list")
    if unknown := set(data) - allowed_top:
        raise ConfigError(f"{path}: unknown key(s) {sorted(unknown)}")
    series: list[Series] = []
    for index, entry in enumerate(data["series"]):
        where = f"{path}: series[{index}]"
        if unknown := set(entry) - {"name", "build", "marker", "color", "points"}:
            raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}")
        points = []
        for j, raw in enumerate(entry.get("points") or []):
            allowed = {
                "label",
                "parallel",
                "number",
                "interactivity",
                "throughput_per_gpu",
                "occupancy",
            }
            if unknown := set(raw) - allowed:
                raise ConfigError(f"{where}.points[{j}]: unknown key(s) {sorted(unknown)}")
            try:
                values = {key: _finite(raw.get(key)) for key in METRICS}
                points.append(
                    SeriesPoint(
                        label=str(raw["label"]),
                        parallel=int(raw["parallel"]),
                        number=int(raw["number"]),
                        values=values,
                    )
                )
            except KeyError as exc:
                raise ConfigError(f"{where}.points[{j}]: missing key {exc}") from None
        series.append(
            Series(
                name=f"published · {entry['name']}",
                points=points,
                published=True,
                build=entry.get("build"),
                color=entry.get("color"),
                marker=entry.get("marker"),
            )
        )
    return data, series


# --------------------------------------------------------------------------- metadata text


def _serve(run: Run) -> dict[str, Any]:
    serve = run.manifest.profile.get("serve") if isinstance(run.manifest.profile, dict) else None
    return serve if isinstance(serve, dict) else {}


def _gpu_name(run: Run) -> str | None:
    host = run.manifest.host or {}
    smi = host.get("nvidia_smi")
    if isinstance(smi, dict) and isinstance(smi.get("gpus"), list) and smi["gpus"]:
        first = smi["gpus"][0]
        if isinstance(first, dict) and isinstance(first.get("name"), str):
            return first["name"]
    for key in ("gpu_name", "gpu", "gpus"):
        value = host.get(key)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, list) and value:
            first = value[0]
            if isinstance(first, str):
                return first
            if isinstance(first, dict) and isinstance(first.get("name"), str):
                return first["name"]
    return None


def _workload(run: Run) -> str:
    """The dataset recipe name, else the built file's stem."""
    dataset = run.manifest.dataset or {}
    for key in ("recipe", "name", "spec"):
        value = dataset.get(key)
        if isinstance(value, str) and value:
            return Path(value).stem if value.endswith((".json", ".yaml")) else value
    path = dataset.get("path")
    return Path(path).stem if isinstance(path, str) else "workload"


def run_title(run: Run) -> str:
    """ "model · workload · TPn[ DPn] · N× GPU" from the run's manifest."""
    manifest = run.manifest
    serve = _serve(run)
    model = serve.get("served-model-name") or manifest.profile.get("model") or "model"
    parts = [str(model), _workload(run)]
    tp = serve.get("tensor-parallel-size")
    dp = serve.get("data-parallel-size")
    if tp:
        parts.append(f"TP{tp}" + (f" DP{dp}" if dp and int(dp) > 1 else ""))
    gpus = int(manifest.profile.get("gpus") or 0) if isinstance(manifest.profile, dict) else 0
    parts.append(f"{gpus}× {_gpu_name(run) or 'GPU'}" if gpus else "CPU")
    return " · ".join(parts)


def figure_title(runs: Sequence[Run]) -> str:
    titles = list(dict.fromkeys(run_title(run) for run in runs))
    if len(titles) == 1:
        return titles[0]
    return " vs ".join(titles) if len(titles) <= 2 else f"{len(runs)} runs"


def footnote(runs: Sequence[Run], definition: str) -> str:
    """Workload and build facts, as the blog's footnote gives them."""
    facts = []
    turns = {p.turns for run in runs for p in run.points}
    sweeps = [run.manifest.sweep for run in runs]
    max_tokens = {s.get("max_tokens") for s in sweeps if s.get("max_tokens") is not None}
    fixed = all(s.get("ignore_eos", False) for s in sweeps)
    if turns and max_tokens:
        turn_text = "/".join(str(t) for t in sorted(turns))
        tokens = "/".join(str(t) for t in sorted(max_tokens))
        facts.append(
            f"Each point: {turn_text}-turn workload, "
            f"{'fixed ' if fixed else 'up to '}{tokens}-token outputs."
        )
    if definition == "blog":
        facts.append("Throughput includes logical prefix-cached prompt tokens.")
    else:
        facts.append("Per-user rate divides by configured (not achieved) concurrency.")
    builds = []
    for series in run_series(runs):
        if series.build:
            builds.append(f"{series.name}: {series.build}")
    if builds:
        facts.append("Builds: " + "; ".join(builds) + ".")
    return " ".join(facts)


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
        if taken[i] or xs[i] is None or ys[i] is None:
            continue
        cluster = [i]
        for j in range(i + 1, len(labels)):
            if taken[j] or xs[j] is None or ys[j] is None:
                continue
            if (
                abs(xs[j] - xs[i]) <= LABEL_MERGE_FRACTION * span_x
                and abs(ys[j] - ys[i]) <= LABEL_MERGE_FRACTION * span_y
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
    mine = [v for run in runs for p in run.points if (v := _finite(p.metrics.get(yk)))]
    theirs = [v for s in published for p in s.points if (v := p.values.get(yk))]
    if not mine or not theirs:
        return True
    return max(mine) * 10 >= max(theirs)


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
    if definition not in DEFINITIONS:
        raise ConfigError(
            f"unknown figure definition {definition!r}; choose one of {', '.join(DEFINITIONS)}"
        )
    spec = DEFINITIONS[definition]
    xk, yk = spec["x"], spec["y"]
    all_series = [(s, i) for i, s in enumerate(run_series(runs))]
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
    span_points = [(p.values.get(xk), p.values.get(yk)) for s, _ in all_series for p in s.points]
    if visible_ref:
        span_points += [(p.values.get(xk), p.values.get(yk)) for s in reference for p in s.points]
    xs_all = [x for x, _ in span_points if x is not None]
    ys_all = [y for _, y in span_points if y is not None]
    span_x = (max(xs_all) - min(min(xs_all), 0.0)) if xs_all else 1.0
    span_y = (max(ys_all) - min(min(ys_all), 0.0)) if ys_all else 1.0

    categories = sorted(
        {p.parallel for s, _ in all_series for p in s.points}
        | ({p.parallel for s in reference for p in s.points})
    )
    for series, index in all_series:
        color, marker = STYLES[index % len(STYLES)]
        _add_series(fig, series, color, marker, xk, yk, span_x, span_y, visible=True)
    for series in reference:
        _add_series(
            fig,
            series,
            series.color or "#888888",
            series.marker or "circle",
            xk,
            yk,
            span_x,
            span_y,
            visible=True if visible_ref else "legendonly",
        )

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
    note = footnote(runs, definition) if runs else ""
    if reference and not visible_ref:
        note += (
            " Published values (8× H200) are far above this run's scale:"
            " click them in the legend to show."
        )
    elif published and definition != "blog":
        note += " The blog published only its own definition; no published overlay here."
    fig.update_layout(
        title={
            "text": _escape(title or (figure_title(runs) if runs else "published reference")),
            "x": 0.01,
        },
        barmode="group",
        template="plotly_white",
        height=880,
        margin={"t": 80, "b": 130},
        legend={"x": 1.02, "y": 1, "xanchor": "left", "font": {"size": 11}},
        meta={"definition": definition, "footnote": note},
    )
    if note:
        lines = textwrap.wrap(_escape(note), 150, break_long_words=False, break_on_hyphens=False)
        wrapped = "<br>".join(lines)
        fig.add_annotation(
            text=wrapped,
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
    if not any(
        p.values.get(xk) is not None and p.values.get(yk) is not None
        for s, _ in all_series
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


def _add_series(
    fig: go.Figure,
    series: Series,
    color: str,
    marker: str,
    xk: str,
    yk: str,
    span_x: float,
    span_y: float,
    *,
    visible: bool | str,
) -> None:
    name = _escape(series.name)
    group = f"{'pub' if series.published else 'run'}:{series.name}"
    ok = [
        p
        for p in series.points
        if p.valid and p.values.get(xk) is not None and p.values.get(yk) is not None
    ]
    bad = [
        p
        for p in series.points
        if not p.valid and p.values.get(xk) is not None and p.values.get(yk) is not None
    ]
    xs = [p.values[xk] for p in ok]
    ys = [p.values[yk] for p in ok]
    meta = {"series": series.name, "published": series.published}
    dash = "dot" if series.published else "solid"
    common = {"legendgroup": group, "visible": visible}

    fig.add_trace(
        go.Scatter(
            x=xs,
            y=ys,
            mode="lines",
            name=f"{name} · sweep order",
            line={"color": color, "width": 1, "dash": dash},
            opacity=0.35,
            hoverinfo="skip",
            showlegend=False,
            meta={**meta, "role": "sweep"},
            **common,
        ),
        row=1,
        col=1,
    )
    order = frontier_path(list(zip(xs, ys, strict=True)))
    fig.add_trace(
        go.Scatter(
            x=[xs[i] for i in order],
            y=[ys[i] for i in order],
            mode="lines",
            name=f"{name} · Pareto frontier",
            line={"color": color, "width": 3.2, "dash": dash},
            hoverinfo="skip",
            showlegend=False,
            meta={**meta, "role": "frontier"},
            **common,
        ),
        row=1,
        col=1,
    )
    on_frontier = frontier_mask(list(zip(xs, ys, strict=True)))
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=ys,
            mode="markers+text",
            name=name,
            text=_merged_labels(xs, ys, [p.label for p in ok], span_x, span_y),
            textposition="top right",
            textfont={"size": 11, "color": color},
            marker={
                "color": "white" if series.published else color,
                "symbol": marker,
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
            **common,
        ),
        row=1,
        col=1,
    )
    if bad:
        fig.add_trace(
            go.Scatter(
                x=[p.values[xk] for p in bad],
                y=[p.values[yk] for p in bad],
                mode="markers+text",
                name=f"{name} · invalid",
                text=[f"{p.label} ✗" for p in bad],
                textposition="bottom right",
                textfont={"size": 10, "color": "#b00020"},
                marker={
                    "color": "rgba(0,0,0,0)",
                    "symbol": "x-open",
                    "size": 12,
                    "line": {"color": "#b00020", "width": 2},
                },
                hovertext=[_hover(p, series, xk, yk) for p in bad],
                hoverinfo="text",
                meta={**meta, "role": "invalid"},
                **common,
            ),
            row=1,
            col=1,
        )

    occ = [p for p in series.points if p.values.get("occupancy") is not None]
    fig.add_trace(
        go.Bar(
            x=[str(p.parallel) for p in occ],
            y=[p.values["occupancy"] for p in occ],
            name=name,
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
            hovertext=[_hover(p, series, xk, yk) for p in occ],
            hoverinfo="text",
            meta={**meta, "role": "occupancy"},
            **common,
        ),
        row=2,
        col=1,
    )


def traces_by_role(fig: go.Figure, role: str, *, published: bool | None = None) -> list[Any]:
    """The figure's traces with meta role `role` (optionally only (non-)published ones)."""
    out = []
    for trace in fig.data:
        meta = trace.meta if isinstance(trace.meta, dict) else {}
        if meta.get("role") == role and (published is None or meta.get("published") == published):
            out.append(trace)
    return out
