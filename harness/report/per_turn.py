"""Report figures from the points' per-request tables (harness/analysis/request_table.py).

- TTFT by turn index, per arm (run) and point: the median TTFT of turn t over the point's
  successful requests. Under think time this is where an idle session's evicted or offloaded
  blocks show: its next turn pays for them.
- Prefix-cache hit by turn index: cached / prompt tokens of turn t. The cached count is the
  server's own (`server_cached_tokens`: vLLM's usage.prompt_tokens_details.cached_tokens, kept
  when the think-time client ran against a server sending it) wherever a point has it, else
  EvalScope's client estimate (previous prompt + reply), which cannot show cache a pause lost;
  each trace says which it used.
- TTFT CDF per arm and point (all successful requests).
- KV transfer per point: the offloading connector's loads and stores and HiSparse's host-to-
  device bytes (server counters over the point), beside the per-turn figures.

Runs without tables (recorded before the table was kept) contribute nothing; the figures are
left out when no run has a table. Trace names are the run and point labels, escaped by plotly's
JSON (the dashboard escapes the JSON for <script>).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from harness.analysis.point_table import point_table
from harness.results import Run

TRANSFER_METRICS = (
    ("offload_load_gib", "offload loads (CPU→GPU)"),
    ("offload_store_gib", "offload stores (GPU→CPU)"),
    ("hisparse_h2d_gib", "HiSparse host→device"),
)


def _tables(runs: Sequence[Run]) -> list[tuple[str, str, pd.DataFrame]]:
    out = []
    for run in runs:
        for point in run.points:
            if not point.valid:
                continue
            table = point_table(run.root, point.point_id)
            if table is not None and len(table):
                out.append((run.name, point.label, table[table["success"].astype(bool)]))
    return out


SERVER_SOURCE, CLIENT_SOURCE = "server", "client estimate"


def cached_source(table: pd.DataFrame) -> str:
    """Where a point's cached-token counts come from: the server's, when every successful
    request of the point has one, else EvalScope's estimate (a mix would not add up)."""
    if "server_cached_tokens" not in table.columns or table.empty:
        return CLIENT_SOURCE
    return SERVER_SOURCE if table["server_cached_tokens"].notna().all() else CLIENT_SOURCE


def by_turn(table: pd.DataFrame) -> pd.DataFrame:
    """Per turn index: median TTFT (ms), requests, and cached / prompt tokens (the cached
    count from `cached_source`)."""
    column = "server_cached_tokens" if cached_source(table) == SERVER_SOURCE else "cached_tokens"
    grouped = table.groupby("turn")
    return pd.DataFrame(
        {
            "ttft_ms": grouped["ttft_s"].median() * 1000.0,
            "requests": grouped.size(),
            "hit": grouped[column].sum().astype(float)
            / grouped["prompt_tokens"].sum().replace(0, np.nan).astype(float),
        }
    )


def _layout(fig: go.Figure, title: str, x: str, y: str) -> go.Figure:
    fig.update_layout(
        title=title,
        xaxis_title=x,
        yaxis_title=y,
        template="plotly_white",
        legend={"title": "run · point"},
        margin={"l": 60, "r": 20, "t": 60, "b": 50},
    )
    return fig


def ttft_by_turn_figure(tables: list[tuple[str, str, pd.DataFrame]]) -> go.Figure:
    fig = go.Figure()
    for run, label, table in tables:
        rows = by_turn(table)
        fig.add_trace(
            go.Scatter(
                x=rows.index.tolist(),
                y=rows["ttft_ms"].tolist(),
                mode="lines+markers",
                name=f"{run} · {label}",
                customdata=rows["requests"].tolist(),
                hovertemplate="turn %{x}: median TTFT %{y:.1f} ms (%{customdata} requests)",
            )
        )
    return _layout(fig, "TTFT by turn index", "turn", "median TTFT (ms)")


def prefix_hit_by_turn_figure(tables: list[tuple[str, str, pd.DataFrame]]) -> go.Figure:
    fig = go.Figure()
    sources = set()
    for run, label, table in tables:
        rows = by_turn(table)
        source = cached_source(table)
        sources.add(source)
        fig.add_trace(
            go.Scatter(
                x=rows.index.tolist(),
                y=rows["hit"].tolist(),
                mode="lines+markers",
                name=f"{run} · {label} ({source})",
                meta=source,
                hovertemplate=f"turn %{{x}}: %{{y:.1%}} of prompt tokens cached ({source})",
            )
        )
    fig.update_yaxes(tickformat=".0%", range=[0, 1.02])
    title = f"Prefix-cache hit by turn index ({' and '.join(sorted(sources))})"
    return _layout(fig, title, "turn", "cached / prompt tokens")


def ttft_cdf_figure(tables: list[tuple[str, str, pd.DataFrame]]) -> go.Figure:
    fig = go.Figure()
    for run, label, table in tables:
        values = np.sort(table["ttft_s"].dropna().to_numpy() * 1000.0)
        if not len(values):
            continue
        share = np.arange(1, len(values) + 1) / len(values)
        fig.add_trace(
            go.Scatter(
                x=values.tolist(),
                y=share.tolist(),
                mode="lines",
                line={"shape": "hv"},
                name=f"{run} · {label}",
                hovertemplate="%{y:.0%} of requests at or below %{x:.1f} ms",
            )
        )
    fig.update_yaxes(tickformat=".0%", range=[0, 1.02])
    return _layout(fig, "TTFT CDF", "TTFT (ms)", "share of requests")


def transfer_figure(runs: Sequence[Run]) -> go.Figure | None:
    """Bars of the KV transfer counters per point; None when no run recorded any."""
    fig = go.Figure()
    for key, label in TRANSFER_METRICS:
        xs, ys = [], []
        for run in runs:
            for point in run.points:
                value = point.metrics.get(key)
                if value is not None:
                    xs.append(f"{run.name} · {point.label}")
                    ys.append(value)
        if xs:
            fig.add_trace(go.Bar(x=xs, y=ys, name=label))
    if not fig.data:
        return None
    fig.update_layout(barmode="group")
    return _layout(fig, "KV transfer per point (server counters)", "run · point", "GiB")


CAPTIONS = {
    "ttft-turn": "Median TTFT of each turn index, per run and point (per-request tables). "
    "Under think time, a session whose blocks left the GPU during its pause pays on its next "
    "turn.",
    "hit-turn": "Prefix-cache hit by turn index: cached ÷ prompt tokens. Traces marked (server) "
    "use the server's cached tokens per request (vLLM's usage.prompt_tokens_details, recorded "
    "by the think-time client); (client estimate) is EvalScope's previous prompt + reply, "
    "which cannot show cache a pause lost. The server's hit rate per point is in the tables.",
    "ttft-cdf": "TTFT CDF per run and point: the share of successful requests at or below each "
    "TTFT.",
    "transfer": "KV transfer per point from the server's counters: offloading connector loads "
    "and stores, HiSparse host-to-device traffic.",
}


def per_turn_figures(runs: Sequence[Run]) -> list[tuple[str, str, go.Figure]]:
    """(id, caption, figure) for the report; [] when no run has tables or transfer counters."""
    tables = _tables(runs)
    out: list[tuple[str, str, go.Figure]] = []
    if tables:
        out += [
            ("ttft-turn", CAPTIONS["ttft-turn"], ttft_by_turn_figure(tables)),
            ("hit-turn", CAPTIONS["hit-turn"], prefix_hit_by_turn_figure(tables)),
            ("ttft-cdf", CAPTIONS["ttft-cdf"], ttft_cdf_figure(tables)),
        ]
    transfer = transfer_figure(runs)
    if transfer is not None:
        out.append(("transfer", CAPTIONS["transfer"], transfer))
    return out
