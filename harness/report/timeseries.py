"""Per-point time series of the scraped /metrics (the dashboard's "Scraped /metrics" section).

One figure per configured point, stacked panels (running, waiting, KV usage, preemptions, MTP
acceptance), one line per (run, repeat), time in seconds since the point's first request.
Counters use the reset rule of :func:`harness.analysis.metrics.counter_increase`.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from harness import metric_names as mn
from harness.analysis.metrics import counter_increase, counter_series
from harness.client.scrape import Sample, read_samples_counted
from harness.names import for_plotly, is_name
from harness.report.figures import STYLES, Series
from harness.results import Run, RunLayout

# Scraped series shown per point: (title, sample name, how to fold engines / counters).
TIMESERIES: tuple[tuple[str, str, str], ...] = (
    ("Requests running", mn.NUM_REQUESTS_RUNNING, "sum"),
    ("Requests waiting", mn.NUM_REQUESTS_WAITING, "sum"),
    ("KV-cache usage (fraction)", mn.KV_CACHE_USAGE_PERC, "max"),
    ("Preemptions (cumulative in point)", mn.total(mn.NUM_PREEMPTIONS), "counter"),
    ("MTP acceptance length (per scrape interval)", "acceptance", "acceptance"),
)


# --------------------------------------------------------------------------- time series

SCRAPED_NAMES = frozenset(
    {
        mn.NUM_REQUESTS_RUNNING,
        mn.NUM_REQUESTS_WAITING,
        mn.KV_CACHE_USAGE_PERC,
        mn.total(mn.NUM_PREEMPTIONS),
        mn.NUM_PREEMPTIONS,
        mn.total(mn.SPEC_DECODE_NUM_ACCEPTED_TOKENS),
        mn.SPEC_DECODE_NUM_ACCEPTED_TOKENS,
        mn.total(mn.SPEC_DECODE_NUM_DRAFTS),
        mn.SPEC_DECODE_NUM_DRAFTS,
    }
)


def read_scraped(path: Path) -> list[Sample]:
    """The samples.csv rows the panels need (a GPU point holds ~400 series per scrape: reading
    only these names keeps a report of a 3-hour sweep quick)."""
    return read_scraped_counted(path)[0]


def read_scraped_counted(path: Path) -> tuple[list[Sample], int]:
    """:func:`read_scraped` and how many rows were malformed (skipped and named in the panel's
    caption, never fatal)."""
    return read_samples_counted(path, SCRAPED_NAMES)


def _gauge(samples: list[Sample], name: str, fold: str) -> tuple[list[float], list[float]]:
    by_time: dict[float, list[float]] = defaultdict(list)
    for s in samples:
        if s.name == name:
            by_time[s.timestamp].append(s.value)
    times = sorted(by_time)
    combine = max if fold == "max" else sum
    return times, [float(combine(by_time[t])) for t in times]


def _counter(samples: list[Sample], name: str) -> tuple[list[float], list[float]]:
    """Cumulative increase since the first scrape, summed over series, resets handled."""
    increments: dict[float, float] = defaultdict(float)
    for points in counter_series(samples, name, clock="timestamp"):
        increments[points[0][0]] += 0.0
        for (_, before), (t, after) in itertools.pairwise(points):
            increments[t] += counter_increase(before, after)
    times = sorted(increments)
    total, values = 0.0, []
    for t in times:
        total += increments[t]
        values.append(total)
    return times, values


def _acceptance(samples: list[Sample]) -> tuple[list[float], list[float]]:
    """1 + d(accepted)/d(drafts) per scrape interval, where drafts moved."""
    t_acc, acc = _counter(samples, mn.total(mn.SPEC_DECODE_NUM_ACCEPTED_TOKENS))
    t_dr, dr = _counter(samples, mn.total(mn.SPEC_DECODE_NUM_DRAFTS))
    accepted, drafts = dict(zip(t_acc, acc, strict=True)), dict(zip(t_dr, dr, strict=True))
    times = sorted(set(accepted) & set(drafts))
    out_t, out_v = [], []
    for before, after in itertools.pairwise(times):
        d_drafts = drafts[after] - drafts[before]
        if d_drafts > 0:
            out_t.append(after)
            out_v.append(1.0 + (accepted[after] - accepted[before]) / d_drafts)
    return out_t, out_v


def timeseries_figure(
    point_label: str, entries: list[tuple[str, int, tuple[float, float], list[Sample]]]
) -> go.Figure:
    """Stacked panels for one configured point; one line per (run, repeat).

    `entries`: (series name, style index, point window (epoch s), samples). Time is seconds
    since the window start (first request), so runs line up; the window is shaded. Panels whose
    metric no run exported (e.g. MTP acceptance without spec decode) are left out and named.
    """
    lines: dict[int, list[tuple[str, int, list[float], list[float]]]] = defaultdict(list)
    for name, style, window, samples in entries:
        for index, (_, metric, fold) in enumerate(TIMESERIES):
            if fold == "acceptance":
                times, values = _acceptance(samples)
            elif fold == "counter":
                times, values = _counter(samples, metric)
            else:
                times, values = _gauge(samples, metric, fold)
            if times:
                lines[index].append((name, style, [t - window[0] for t in times], values))
    shown = sorted(lines) or [0]
    missing = [TIMESERIES[i][0] for i in range(len(TIMESERIES)) if i not in lines]
    fig = make_subplots(
        rows=len(shown),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=[TIMESERIES[i][0] for i in shown],
    )
    for row, index in enumerate(shown, start=1):
        for name, style, xs, ys in lines.get(index, []):
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode="lines+markers",
                    name=for_plotly(name),  # plotly renders markup in names: shown literally
                    legendgroup=name,
                    showlegend=row == 1,
                    line={"color": STYLES[style % len(STYLES)][0], "width": 1.5},
                    marker={"size": 4},
                    meta={"series": name, "metric": TIMESERIES[index][1]},
                ),
                row=row,
                col=1,
            )
    longest = max((end - start for _, _, (start, end), _ in entries), default=0.0)
    if longest > 0:
        fig.add_vrect(
            x0=0, x1=longest, fillcolor="#888", opacity=0.08, line_width=0, row="all", col=1
        )
    fig.update_xaxes(showticklabels=True)
    fig.update_xaxes(
        title_text="seconds since the point's first request (shaded: measured window)",
        row=len(shown),
    )
    title = f"{for_plotly(point_label)}: /metrics"
    if missing:
        title += (
            f" <span style='font-size:11px;color:#888'>(not exported: {', '.join(missing)})</span>"
        )
    fig.update_layout(
        template="plotly_white",
        height=180 * len(shown) + 90,
        margin={"t": 70, "b": 40},
        title={"text": title},
        legend={"x": 1.01, "y": 1, "xanchor": "left"},
    )
    return fig


def _entries(
    runs: Sequence[Run], series: Sequence[Series], key: tuple[int, int]
) -> tuple[str, list[tuple[str, int, tuple[float, float], list[Sample]]], int]:
    """(point label, timeseries_figure entries, malformed samples.csv rows) of one configured
    point across the runs."""
    entries: list[tuple[str, int, tuple[float, float], list[Sample]]] = []
    label, bad = f"c{key[0]}", 0
    for style, (run, s) in enumerate(zip(runs, series, strict=True)):
        for record in run.points:
            if (record.parallel, record.number) != key:
                continue
            label = record.label
            if not is_name(record.point_id):  # "../../x" would lead out of the run
                continue
            path = RunLayout(run.root).samples_csv(record.point_id)
            if not path.is_file():
                continue
            name = s.name + (f" r{record.repeat}" if record.repeat else "")
            samples, skipped = read_scraped_counted(path)
            bad += skipped
            entries.append((name, style, (record.window[0], record.window[1]), samples))
    return label, entries, bad


def timeseries_figures(
    runs: Sequence[Run], series: Sequence[Series]
) -> list[tuple[int, str, go.Figure]]:
    """(index, caption, figure) per configured point that has samples in some run."""
    out = []
    keys = sorted({(p.parallel, p.number) for run in runs for p in run.points})
    for index, (parallel, number) in enumerate(keys):
        label, entries, bad = _entries(runs, series, (parallel, number))
        if entries:
            caption = f"{label} — parallel {parallel}, {number} conversations"
            if bad:
                caption += f" ({bad:,} malformed samples.csv row(s) skipped)"
            out.append((index, caption, timeseries_figure(label, entries)))
    return out
