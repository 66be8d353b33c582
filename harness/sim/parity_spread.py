"""Timing noise in CPU-parity predictions: what a preemption count can be expected to be.

A CPU parity point preempts 0-2 times, and whether it does depends on which turns overlap: a
turn-4 request crossing a block boundary while another fills the pool (docs/simulator.md §6c).
Which turns overlap depends on timing to a few milliseconds, and the real server's timing is
noisy: on the unpressured base sweep's c1 point the same turn's client latency varies by about
10 ms between conversations. A replay at the measured mean times is one draw of that chaos, so
its count (0 or 1) is not a prediction of the measured mean.

So the prediction is an ensemble: the same paced replay with each request's out-of-engine time
drawn around the point's measured mean, with the spread measured on the fit run (below), once
per seed. Its mean is the expected count, and the distribution of its totals over a cell's
repeats is what the measured total is judged against (`total_interval`).
"""

from __future__ import annotations

import math
import random
from itertools import accumulate
from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis.request_table import TABLE_NAME, read_table
from harness.results import Run, RunLayout


def overhead_spread_s(run: Run) -> float:
    """The pooled standard deviation of the client latency of the same turn across
    conversations, at the run's c1 points (one request at a time, so no queueing adds to it):
    the timing noise the ensemble draws with. 0.0 when no c1 point has two requests of a turn."""
    layout = RunLayout(run.root)
    frames = []
    for point in run.valid_points():
        path = Path(layout.point_dir(point.point_id)) / TABLE_NAME
        if point.parallel == 1 and path.exists():
            frame = read_table(path)
            frames.append(frame[frame["success"].astype(bool)][["turn", "latency_s"]])
    if not frames:
        return 0.0
    return pooled_sd(pd.concat(frames), "turn", "latency_s")


def pooled_sd(frame: pd.DataFrame, group: str, value: str) -> float:
    """sqrt(sum of within-group squared deviations / (n - groups)), over groups of 2 or more."""
    grouped = frame.dropna(subset=[value]).groupby(group)[value]
    sizes = grouped.size()
    squares = grouped.apply(lambda s: float(((s - s.mean()) ** 2).sum()))
    dof = int((sizes[sizes > 1] - 1).sum())
    return math.sqrt(float(squares[sizes > 1].sum()) / dof) if dof > 0 else 0.0


def draw_delay(rng: random.Random, mean: float, sd: float) -> float:
    """A positive delay with this mean and standard deviation (lognormal: a delay has no
    negative tail); `mean` itself when either is zero."""
    if mean <= 0.0 or sd <= 0.0:
        return mean
    sigma2 = math.log1p((sd / mean) ** 2)
    return rng.lognormvariate(math.log(mean) - sigma2 / 2.0, math.sqrt(sigma2))


def total_distribution(per_repeat: list[list[int]]) -> list[float]:
    """P(total = k) for the sum over repeats of one draw from each repeat's ensemble (each an
    empirical distribution of its seeds' counts, the repeats independent)."""
    total = np.ones(1)
    for draws in per_repeat:
        if not draws:
            raise ValueError("a repeat without ensemble draws")
        pmf = np.bincount(np.asarray(draws, dtype=int)) / len(draws)
        total = np.convolve(total, pmf)
    return [float(p) for p in total]


def total_interval(per_repeat: list[list[int]], level: float = 0.8) -> tuple[int, int]:
    """The central `level` interval of `total_distribution`: the smallest total whose
    cumulative probability reaches (1 - level) / 2, and the smallest reaching (1 + level) / 2."""
    cdf = list(accumulate(total_distribution(per_repeat)))
    tail = (1.0 - level) / 2.0

    def quantile(q: float) -> int:
        return next(k for k, c in enumerate(cdf) if c >= q - 1e-12)

    return quantile(tail), quantile(1.0 - tail)
