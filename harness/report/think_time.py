"""One figure for a think-time study: arms x think times x concurrencies, three panels.

The runs of a study differ only in their arm (profile) and their workload's think time
(`sweep.think_time`, harness/dataset/thinktime.py). Each (arm, think time) pair is one series:

1. occupancy (mean running requests while any run, docs/metrics.md) against concurrency;
2. median TTFT by turn index at one concurrency (c32 by default; otherwise the highest
   concurrency every series ran), from the points' per-request tables: under think time an
   idle session's blocks may leave the GPU, and its next turn pays for them;
3. goodput (requests meeting the objectives per second) against concurrency, when the runs
   name objectives (`sweep.slo`, or `apply_objectives` beforehand).

Colour is the think time, the line dash and marker the arm. Repeats of a point are reduced to
the median of their valid repeats; TTFT by turn pools the valid repeats' requests. Every trace
carries ``meta = {"panel", "arm", "think_s"}`` so that tests find traces without their names.
The figure is drawn only when the runs vary the think time of at least one arm
(`think_time_figure` returns None otherwise): `repro report` then shows it on its own.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from harness.analysis.point_table import point_table
from harness.dataset.thinktime import ThinkTime
from harness.report.per_turn import by_turn
from harness.results import Run
from harness.run.config import configured_think_time

DEFAULT_TTFT_PARALLEL = 32
PALETTE = ("#1b9e77", "#7570b3", "#d95f02", "#e7298a", "#66a61e", "#e6ab02", "#a6761d")
ARM_STYLES = (("solid", "circle"), ("dash", "diamond"), ("dot", "square"), ("dashdot", "x"))
PANELS = ("occupancy", "ttft_by_turn", "goodput")


def think_seconds(model: ThinkTime) -> float:
    """The think time's typical pause: its fixed value, mean or median (0 when none)."""
    if not model.active:
        return 0.0
    for value in (model.seconds, model.mean_s, model.median_s):
        if value is not None:
            return float(value)
    return float("nan")  # a per-turn file: no single number


def think_label(model: ThinkTime) -> str:
    if not model.active:
        return "no think time"
    if model.kind == "file":
        return f"think time from {model.path}"
    word = {"fixed": "", "exponential": "mean ", "lognormal": "median "}[model.kind]
    return f"think {word}{think_seconds(model):g} s"


@dataclass
class StudySeries:
    """One (arm, think time) of a study: per concurrency, the values the figure draws."""

    arm: str
    think: ThinkTime
    occupancy: dict[int, float] = field(default_factory=dict)
    goodput: dict[int, float] = field(default_factory=dict)
    tables: dict[int, list[pd.DataFrame]] = field(default_factory=dict)

    @property
    def think_s(self) -> float:
        return think_seconds(self.think)

    @property
    def name(self) -> str:
        return f"{self.arm} · {think_label(self.think)}"


def run_think_time(run: Run) -> ThinkTime:
    return configured_think_time(run)


def _median_by_parallel(run: Run, key: str) -> dict[int, float]:
    values: dict[int, list[float]] = {}
    for point in run.valid_points():
        value = point.metrics.get(key)
        if value is not None:
            values.setdefault(point.parallel, []).append(float(value))
    return {c: statistics.median(v) for c, v in sorted(values.items())}


def study_series(runs: Sequence[Run]) -> list[StudySeries]:
    """The runs as (arm, think time) series, in arm order then think time (runs of the same
    pair are merged: their points join)."""
    by_key: dict[tuple[str, ThinkTime], StudySeries] = {}
    for run in runs:
        think = run_think_time(run)
        key = (run.manifest.profile_name, think)
        series = by_key.setdefault(key, StudySeries(run.manifest.profile_name, think))
        series.occupancy.update(_median_by_parallel(run, "occupancy"))
        series.goodput.update(_median_by_parallel(run, "goodput_rps"))
        for point in run.valid_points():
            table = point_table(run.root, point.point_id)
            if table is not None and len(table):
                ok = table[table["success"].astype(bool)]
                series.tables.setdefault(point.parallel, []).append(ok)
    arms = list(dict.fromkeys(arm for arm, _ in by_key))
    return sorted(by_key.values(), key=lambda s: (arms.index(s.arm), *_pause_order(s), s.name))


def varies_think_time(series: Sequence[StudySeries]) -> bool:
    thinks: dict[str, set[ThinkTime]] = {}
    for s in series:
        thinks.setdefault(s.arm, set()).add(s.think)
    return any(len(v) > 1 for v in thinks.values())


def ttft_parallel(series: Sequence[StudySeries], preferred: int = DEFAULT_TTFT_PARALLEL) -> int:
    """The concurrency of the TTFT-by-turn panel: `preferred` if any series has tables there,
    else the highest concurrency with tables in every series that has any."""
    with_tables = [set(s.tables) for s in series if s.tables]
    if not with_tables or any(preferred in t for t in with_tables):
        return preferred
    common = set.intersection(*with_tables)
    return max(common) if common else max(set.union(*with_tables))


def ttft_by_turn(series: StudySeries, parallel: int) -> pd.DataFrame | None:
    """Median TTFT (ms) per turn index over the series' requests at `parallel`."""
    tables = series.tables.get(parallel)
    if not tables:
        return None
    return by_turn(pd.concat(tables, ignore_index=True))


def _pause_order(s: StudySeries) -> tuple[bool, float]:
    return (s.think_s != s.think_s, s.think_s if s.think_s == s.think_s else 0.0)


def think_time_figure(
    runs: Sequence[Run], *, parallel: int = DEFAULT_TTFT_PARALLEL, title: str | None = None
) -> go.Figure | None:
    """The study's three-panel figure, or None when no arm was run at two think times."""
    series = study_series(runs)
    if not varies_think_time(series):
        return None
    at = ttft_parallel(series, parallel)
    fig = make_subplots(
        rows=1,
        cols=3,
        horizontal_spacing=0.07,
        subplot_titles=(
            "Occupancy (mean running requests)",
            f"Median TTFT by turn at c{at}",
            "Goodput (requests meeting the objectives / s)",
        ),
    )
    arms = list(dict.fromkeys(s.arm for s in series))
    # one colour per think time, in order of the typical pause (a per-turn file's NaN last)
    thinks = list(dict.fromkeys(t.think for t in sorted(series, key=_pause_order)))
    for s in series:
        colour = PALETTE[thinks.index(s.think) % len(PALETTE)]
        dash, symbol = ARM_STYLES[arms.index(s.arm) % len(ARM_STYLES)]
        style = {
            "mode": "lines+markers",
            "line": {"color": colour, "dash": dash},
            "marker": {"symbol": symbol, "size": 8},
            "legendgroup": s.name,
            "name": s.name,
        }
        curves: list[tuple[str, list[float], list[float], str]] = [
            ("occupancy", list(s.occupancy), list(s.occupancy.values()), "%{y:.2f} running"),
        ]
        turns = ttft_by_turn(s, at)
        if turns is not None:
            curves.append(
                (
                    "ttft_by_turn",
                    [float(t) for t in turns.index],
                    turns["ttft_ms"].tolist(),
                    "turn %{x}: median TTFT %{y:.1f} ms",
                )
            )
        if s.goodput:
            curves.append(("goodput", list(s.goodput), list(s.goodput.values()), "%{y:.3f} req/s"))
        for panel, xs, ys, hover in curves:
            col = PANELS.index(panel) + 1
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    showlegend=panel == "occupancy",
                    meta={"panel": panel, "arm": s.arm, "think_s": s.think_s},
                    hovertemplate=f"{s.name}<br>{hover}<extra></extra>",
                    **style,
                ),
                row=1,
                col=col,
            )
    concurrencies = sorted({c for s in series for c in (*s.occupancy, *s.goodput)})
    for col in (1, 3):
        fig.update_xaxes(
            title_text="concurrency", type="log", tickvals=concurrencies, row=1, col=col
        )
    fig.update_xaxes(title_text="turn", row=1, col=2)
    fig.update_yaxes(title_text="running requests", rangemode="tozero", row=1, col=1)
    # TTFT spans sub-second (the cache held) to minutes (queued behind a full pool)
    fig.update_yaxes(title_text="TTFT (ms, log)", type="log", row=1, col=2)
    fig.update_yaxes(title_text="req/s", rangemode="tozero", row=1, col=3)
    fig.update_layout(
        title=title or "Think time: occupancy, TTFT by turn and goodput per arm",
        template="plotly_white",
        legend={"title": "arm · think time", "orientation": "h", "y": -0.2},
        margin={"l": 60, "r": 20, "t": 80, "b": 80},
        height=520,
    )
    return fig


CAPTION = (
    "Think-time study: each (arm, think time) is one colour (think time) and dash (arm). Left: "
    "mean running requests per concurrency; middle: median TTFT of each turn index at one "
    "concurrency (a session whose blocks left the GPU during its pause pays on its next turn); "
    "right: goodput under the runs' objectives. Simulated runs are predictions, not measurements."
)
