"""Plotly figures for the capacity model: concurrency vs sequence length, memory composition."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from harness.capacity.deployment import GIB, Deployment
from harness.capacity.formulas import CHART_SEQ_LENS, SeqResult, Variant, chart_curve
from harness.capacity.measured import RunComparison, compare_run
from harness.results import Run, atomic_write_text

if TYPE_CHECKING:
    import plotly.graph_objects as go

HISPARSE_COLOUR = "#008768"
BASELINE_COLOUR = "#828282"
MTP_COLOUR = "#2a7ae2"
MEASURED_COLOUR = "#c2410c"
SEGMENT_COLOURS = {
    "Model weights": "#4b5563",
    "vLLM runtime + HBM headroom": "#a8adb5",
    "Hot buffers": "#008768",
    "Indexer KV": "#2a7ae2",
    "Standard KV": "#9a5d00",
    "Unused KV": "#e8e8e8",
    "HiSparse latent KV": "#7656b5",
    "Native indexer offload": "#79b8ff",
    "Unused": "#e8e8e8",
}


def _k(tokens: int) -> str:
    if tokens >= 1048576:
        return f"{tokens / 1048576:g}M"
    return f"{tokens / 1024:g}K" if tokens >= 1024 else str(tokens)


def concurrency_figure(
    dep: Deployment,
    *,
    selected: Sequence[int] = (),
    measured: Sequence[tuple[float, float, str]] = (),
    seq_lens: Sequence[int] = CHART_SEQ_LENS,
) -> go.Figure:
    """Total concurrency against sequence length (log x), non-limiting host pool, as the calculator.

    `measured`: (sequence length, measured occupancy, label) markers from a run.
    """
    import plotly.graph_objects as go

    grid = list(seq_lens)
    default = chart_curve(dep, dep.hot_rows, grid)
    xs = [p[0] for p in default]
    fig = go.Figure()
    hover = "%{x:,} tokens<br>%{y:,} requests<br>min host pool / DP: %{customdata:,} GiB"
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=[p[2] for p in default],
            name=f"HiSparse ({dep.hot_rows:,} hot rows)",
            line={"color": HISPARSE_COLOUR, "width": 2.5},
            customdata=[p[3] for p in default],
            hovertemplate=hover,
        )
    )
    peak: float = max([1] + [p[1] for p in default] + [p[2] for p in default])
    if dep.mtp_rows is not None:
        mtp = chart_curve(dep, dep.mtp_rows, grid)
        peak = max(peak, *(p[2] for p in mtp))
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=[p[2] for p in mtp],
                name=f"HiSparse, MTP{dep.spec_tokens} ({dep.mtp_rows:,} hot rows)",
                line={"color": MTP_COLOUR, "width": 2, "dash": "dash"},
                customdata=[p[3] for p in mtp],
                hovertemplate=hover,
            )
        )
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=[p[1] for p in default],
            name="Non-HiSparse (GPU-resident KV)",
            line={"color": BASELINE_COLOUR, "width": 2.5},
            hovertemplate="%{x:,} tokens<br>%{y:,} requests",
        )
    )
    _hisparse_only_band(fig, [p[0] for p in default if p[1] == 0 and p[2] > 0])
    for seq in selected:
        fig.add_vline(x=seq, line={"color": BASELINE_COLOUR, "dash": "dot", "width": 1})
    if measured:
        peak = max(peak, *(m[1] for m in measured))
        fig.add_trace(
            go.Scatter(
                x=[m[0] for m in measured],
                y=[m[1] for m in measured],
                mode="markers+text",
                text=[m[2] for m in measured],
                textposition="top center",
                name="Measured occupancy",
                marker={"color": MEASURED_COLOUR, "size": 9},
                hovertemplate="%{text}: %{y:.1f} running at ~%{x:,} tokens",
            )
        )
    _concurrency_layout(fig, dep, grid, peak)
    return fig


def _hisparse_only_band(fig: go.Figure, only: list[int]) -> None:
    """Shade the sequence lengths only HiSparse can serve."""
    if not only:
        return
    fig.add_vrect(x0=only[0], x1=only[-1], fillcolor=HISPARSE_COLOUR, opacity=0.1, line_width=0)
    # Annotations on a log axis take log10 coordinates (vrect's own annotation misplaces).
    centre = (math.log10(only[0]) + math.log10(only[-1])) / 2
    fig.add_annotation(
        x=centre,
        y=1,
        yref="paper",
        yanchor="bottom",
        showarrow=False,
        text="HiSparse only",
        font={"color": HISPARSE_COLOUR},
    )


def _concurrency_layout(fig: go.Figure, dep: Deployment, grid: list[int], peak: float) -> None:
    y_max = max(4, 2 ** math.ceil(math.log2(peak)))
    ticks = [t for t in (8192, 32768, 131072, 524288, 1048576) if grid[0] <= t <= grid[-1]]
    fig.update_layout(
        title=(
            f"Concurrency vs. sequence length: {dep.model.display_name}, "
            f"{dep.gpus}x {dep.gpu.upper()} (TP{dep.tp} DP{dep.dp}, {dep.kv_dtype} KV, "
            f"{dep.kv_gib_per_gpu:.1f} GiB KV/GPU)"
        ),
        xaxis={
            "title": "Sequence length (tokens)",
            "type": "log",
            "range": [math.log10(grid[0]), math.log10(grid[-1])],
            "tickvals": ticks,
            "ticktext": [_k(t) for t in ticks],
        },
        yaxis={
            "title": "Total concurrent requests",
            "range": [0, y_max],
            "tickvals": [y_max * f for f in (0, 0.25, 0.5, 0.75, 1)],
        },
        legend={"orientation": "h", "y": -0.2},
        template="plotly_white",
        margin={"t": 60},
    )


def composition_figure(result: SeqResult, *, variant: Variant | None = None) -> go.Figure:
    """GPU HBM and CPU host-pool composition per DP group (the calculator's memory bars)."""
    import plotly.graph_objects as go

    chosen = variant or result.default
    comp = chosen.composition
    rows = [("GPU HBM / DP group", comp["gpu"]), ("CPU host pools / DP group", comp["cpu"])]
    fig = go.Figure()
    for row_label, bar in rows:
        for segment, value in bar["segments"].items():
            fig.add_trace(
                go.Bar(
                    y=[row_label],
                    x=[value / GIB],
                    name=segment,
                    orientation="h",
                    marker={"color": SEGMENT_COLOURS.get(segment, "#999999")},
                    hovertemplate=f"{segment}: %{{x:,.1f}} GiB<extra>{row_label}</extra>",
                    legendgroup=segment,
                )
            )
    hot = f"{chosen.hot_rows:,} hot rows"
    fig.update_layout(
        barmode="stack",
        title=(
            f"Memory composition at {comp['concurrency_per_dp']} requests / DP group, "
            f"{result.seq_len:,} tokens ({hot})"
        ),
        xaxis={"title": "GiB"},
        template="plotly_white",
        legend={"orientation": "h", "y": -0.3},
        height=360,
    )
    return fig


def capacity_figures(
    dep: Deployment | None = None,
    *,
    results: Sequence[SeqResult] = (),
    run: Run | Path | str | RunComparison | None = None,
    measured: Sequence[tuple[float, float, str]] = (),
) -> list[go.Figure]:
    """Figures the dashboard can embed: the concurrency curve, then composition bars.

    Give a Deployment (and optionally evaluated `results`), or `run` (a `harness.results.Run`, a
    run directory, or a `RunComparison`: `compare_run(run, gpu="b200")` for other options):
    the run's profile selects the model and topology and its measured occupancy is marked on
    the curve. A run whose model has no capacity file raises `NoCapacityModel` (a ConfigError).
    """
    if run is not None:
        comparison = run if isinstance(run, RunComparison) else compare_run(run)
        dep = comparison.deployment
        results = comparison.results
        measured = comparison.markers()
    if dep is None:
        raise ValueError("capacity_figures needs a Deployment or a run")
    figures = [concurrency_figure(dep, selected=[r.seq_len for r in results], measured=measured)]
    if results:
        last = results[-1]
        figures.append(composition_figure(last))
        if last.mtp is not None:
            figures.append(composition_figure(last, variant=last.mtp))
    return figures


def write_html(figures: Sequence[go.Figure], path: Path, *, title: str) -> Path:
    """One standalone offline HTML file: plotly.js inline once, then every figure."""
    parts = []
    for index, fig in enumerate(figures):
        parts.append(fig.to_html(full_html=False, include_plotlyjs=(index == 0)))
    safe = escape(title)
    html = (
        "<!doctype html>\n<html><head><meta charset='utf-8'>"
        f"<title>{safe}</title></head><body>\n<h1 style='font-family:sans-serif'>{safe}</h1>\n"
        + "\n".join(parts)
        + "\n</body></html>\n"
    )
    atomic_write_text(Path(path), html)
    return Path(path)
