"""The Pareto frontier of an interactivity/throughput series: membership and curve scalars.

Definition used everywhere in `repro` (figures, dashboards, comparisons):

    A point P is on the frontier iff no other point Q of the same series has
    Q.x >= P.x and Q.y >= P.y with at least one of the two strictly greater.

This is standard (weak) Pareto dominance with both axes "higher is better". The blog's text says
a point is dropped when another has "both higher" values; the two readings differ only on ties:

* equal x, higher y (or equal y, higher x): the lower point is dominated here, kept by the blog's
  literal wording. A point that is no better on one axis and worse on the other is not a trade-off
  a reader would pick, so it is left off the frontier.
* exact duplicates: neither dominates the other, so all copies stay on the frontier (the bold line
  passes through their shared position once).
* points with a missing or non-finite coordinate are never on the frontier and never dominate.

On the blog's published MTP3 values both readings give the same frontier.

Curve-level scalars over a run's (interactivity, throughput per GPU) points (the regression
gate's curve metrics):

- **frontier_auc**: the area dominated by the frontier down to the origin, i.e. the area under
  the frontier's staircase (the union of the rectangles [0, x] x [0, y]). It is the 2-D
  hypervolume with reference point (0, 0): it grows when any frontier point moves up or right and
  does not depend on how many points the sweep had. Unit: tok/s/user x tok/s/GPU.
- **throughput_at(x)**: throughput attainable at interactivity x, by linear interpolation between
  neighbouring frontier points (sorted by interactivity). Left of the frontier (x below its
  lowest interactivity) the best throughput is still attainable, so the value is that point's
  throughput; right of it (x above the highest interactivity) the run cannot serve users that
  fast and the value is None.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence

Point = tuple[float, float]  # (interactivity, throughput)


def _usable(x: float | None, y: float | None) -> bool:
    return x is not None and y is not None and math.isfinite(x) and math.isfinite(y)


def _usable_pairs(
    points: Sequence[tuple[float | None, float | None]],
) -> list[tuple[float, float] | None]:
    """Each (x, y) as floats, or None where either is missing or not finite."""
    return [
        (float(x), float(y)) if x is not None and y is not None and _usable(x, y) else None
        for x, y in points
    ]


def dominates(q: tuple[float, float], p: tuple[float, float]) -> bool:
    """True when q is at least as good as p on both axes and strictly better on one."""
    return q[0] >= p[0] and q[1] >= p[1] and (q[0] > p[0] or q[1] > p[1])


def frontier_mask(points: Sequence[tuple[float | None, float | None]]) -> list[bool]:
    """For each (x, y), whether it is on the Pareto frontier of the series (see module doc)."""
    usable = _usable_pairs(points)
    mask: list[bool] = []
    for i, p in enumerate(usable):
        if p is None:
            mask.append(False)
            continue
        mask.append(
            not any(q is not None and j != i and dominates(q, p) for j, q in enumerate(usable))
        )
    return mask


def frontier_path(points: Sequence[tuple[float | None, float | None]]) -> list[int]:
    """Indices of the frontier points ordered by increasing x (the bold line's drawing order).

    Duplicates are kept once (the first index), so the line does not double back.
    """
    usable = _usable_pairs(points)
    chosen: dict[tuple[float, float], int] = {}
    for i, on in enumerate(frontier_mask(points)):
        if on and (key := usable[i]) is not None:
            chosen.setdefault(key, i)
    return [chosen[key] for key in sorted(chosen, key=lambda k: (k[0], -k[1]))]


def pareto_frontier(points: Iterable[Point]) -> list[Point]:
    """The frontier's distinct points sorted by interactivity, ascending (throughput descends)."""
    pts = list(points)
    return [(float(pts[i][0]), float(pts[i][1])) for i in frontier_path(pts)]


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
