"""Curve-level metrics over a run's interactivity/throughput points (the blog's Pareto panel).

x = interactivity (1000 / mean TPOT, tok/s/user), y = total-token throughput per GPU.

- **Frontier**: the points that no other point beats on both axes (the blog's bold line).
- **frontier_auc**: the area dominated by the frontier down to the origin, i.e. the area under
  the frontier's staircase (sum of the rectangles [0, x] x [0, y] taken as a union). It is the
  2-D hypervolume with reference point (0, 0): it grows when any frontier point moves up or
  right and does not depend on how many points the sweep had. Unit: tok/s/user x tok/s/GPU.
- **throughput_at(x)**: throughput attainable at interactivity x, by linear interpolation between
  neighbouring frontier points (sorted by interactivity). Left of the frontier (x below its
  lowest interactivity) the best throughput is still attainable, so the value is that point's
  throughput; right of it (x above the highest interactivity) the run cannot serve users that
  fast and the value is None.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

Point = tuple[float, float]  # (interactivity, throughput)


def pareto_frontier(points: Iterable[Point]) -> list[Point]:
    """Non-dominated points sorted by interactivity, ascending (throughput then descends)."""
    ordered = sorted(set(points), key=lambda p: (-p[0], -p[1]))
    frontier: list[Point] = []
    best_y = float("-inf")
    for x, y in ordered:  # walk from the fastest per-user point towards the highest throughput
        if y > best_y:
            frontier.append((x, y))
            best_y = y
    return sorted(frontier)


def frontier_auc(points: Iterable[Point]) -> float | None:
    frontier = pareto_frontier(points)
    if not frontier:
        return None
    area = 0.0
    previous_x = 0.0
    # Ascending x means descending y: each step adds the strip [previous_x, x] at height y.
    for x, y in frontier:
        area += (x - previous_x) * y
        previous_x = x
    return area


def throughput_at(points: Iterable[Point], interactivity: float) -> float | None:
    frontier = pareto_frontier(points)
    if not frontier:
        return None
    if interactivity <= frontier[0][0]:
        return frontier[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(frontier):
        if x0 <= interactivity <= x1:
            return y0 + (y1 - y0) * (interactivity - x0) / (x1 - x0)
    return None
