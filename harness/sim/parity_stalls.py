"""Shared stalls in CPU-parity replays: pauses every stream of a point sees at once.

On the 2-core machine the real server's API process and the client share the cores with the
engine, and every few seconds all streams of a point stop together for 0.15-0.3 s while the
engine's own inter-token latencies stay under 50 ms (docs/simulator.md §6c). A reply that ends
inside such a pause reaches its client only when the pause ends, so the next turns of every
conversation caught in it are sent together: turns that independent timing noise would have
spread apart arrive at once, and that is when a turn crossing a block boundary meets another
that fills the pool. Drawing each request's out-of-engine time independently cannot produce
that; these pauses are drawn as one process per point, shared by all of its requests.

Measured per point from the client's token times (EvalScope's inter-token latencies): a pause
is a gap above `floor_s` (or ten times the point's median positive gap) that at least two
streams start within `within_s` of each other; a gap of one stream alone is not shared (a
preempted request's stream stops alone). The replay draws pauses as a Poisson process with the
measured rate and resamples the measured durations.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis.request_table import TABLE_NAME, read_table
from harness.results import Run, RunLayout

FLOOR_S = 0.1  # above the real server's longest inter-token latency in the parity runs (50 ms)
WITHIN_S = 0.01  # gaps of different streams starting this close are one pause
MIN_STREAMS = 2


@dataclass(frozen=True)
class SharedStalls:
    rate_per_s: float
    durations_s: tuple[float, ...]

    @property
    def mean_duration_s(self) -> float:
        return float(np.mean(self.durations_s)) if self.durations_s else 0.0

    @property
    def mean_wait_s(self) -> float:
        """What a reply ending at a uniformly random instant waits on average: rate x E[d^2]/2
        (the chance to fall in a pause, rate x E[d], times the mean remainder E[d^2]/2E[d])."""
        if not self.durations_s:
            return 0.0
        d = np.asarray(self.durations_s)
        return float(self.rate_per_s * np.mean(d * d) / 2.0)

    def windows(self, rng: random.Random, start: float, horizon_s: float) -> StallWindows:
        out: list[tuple[float, float]] = []
        if self.rate_per_s <= 0.0 or not self.durations_s:
            return StallWindows(out)
        t = start
        while True:
            t += rng.expovariate(self.rate_per_s)
            if t > start + horizon_s:
                return StallWindows(out)
            out.append((t, t + rng.choice(self.durations_s)))
            t = out[-1][1]  # pauses do not overlap


class StallWindows:
    """Sorted, disjoint pauses on the engine's clock."""

    def __init__(self, windows: list[tuple[float, float]]) -> None:
        self.windows = windows
        self._starts = [a for a, _ in windows]

    def release(self, t: float) -> float:
        """When something due at `t` gets through: the end of the pause `t` falls in, else `t`."""
        i = bisect.bisect_right(self._starts, t) - 1
        if i >= 0 and t < self.windows[i][1]:
            return self.windows[i][1]
        return t


def shared_stalls(frame: pd.DataFrame) -> SharedStalls:
    """The pauses of one point's request table (columns start_s, ttft_s, itl_s, success)."""
    gaps: list[tuple[float, float]] = []  # (start, end) of every long gap of every stream
    positive: list[float] = []
    first, last = float("inf"), float("-inf")
    for row in frame[frame["success"].astype(bool)].itertuples():
        itl = np.asarray(row.itl_s if row.itl_s is not None else [], dtype=float)
        times = row.start_s + row.ttft_s + np.concatenate([[0.0], np.cumsum(itl)])
        first, last = min(first, float(row.start_s)), max(last, float(times[-1]))
        positive.extend(itl[itl > 0].tolist())
        gaps.extend((float(times[i]), float(times[i + 1])) for i in range(len(itl)))
    if not positive:
        return SharedStalls(0.0, ())
    threshold = max(FLOOR_S, 10.0 * float(np.median(positive)))
    long_gaps = sorted((a, b) for a, b in gaps if b - a > threshold)
    durations: list[float] = []
    i = 0
    while i < len(long_gaps):
        j = i
        while j + 1 < len(long_gaps) and long_gaps[j + 1][0] - long_gaps[i][0] <= WITHIN_S:
            j += 1
        if j + 1 - i >= MIN_STREAMS:
            group = long_gaps[i : j + 1]
            durations.append(max(b for _, b in group) - min(a for a, _ in group))
        i = j + 1
    duration = last - first
    rate = len(durations) / duration if duration > 0 else 0.0
    return SharedStalls(rate, tuple(durations))


def point_stalls(run: Run) -> dict[str, SharedStalls]:
    """Every valid point's pauses, by point id (a point without a request table has none)."""
    layout = RunLayout(run.root)
    out: dict[str, SharedStalls] = {}
    for point in run.valid_points():
        path = Path(layout.point_dir(point.point_id)) / TABLE_NAME
        if path.exists():
            out[point.point_id] = shared_stalls(read_table(path))
    return out
