"""Per-point Pareto-frontier membership of an interactivity/throughput series.

(Curve scalars such as the frontier AUC live in `harness.analysis.curves`, which uses the same definition.)

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
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def _usable(x: float | None, y: float | None) -> bool:
    return x is not None and y is not None and math.isfinite(x) and math.isfinite(y)


def dominates(q: tuple[float, float], p: tuple[float, float]) -> bool:
    """True when q is at least as good as p on both axes and strictly better on one."""
    return q[0] >= p[0] and q[1] >= p[1] and (q[0] > p[0] or q[1] > p[1])


def frontier_mask(points: Sequence[tuple[float | None, float | None]]) -> list[bool]:
    """For each (x, y), whether it is on the Pareto frontier of the series (see module doc)."""
    usable = [(float(x), float(y)) if _usable(x, y) else None for x, y in points]
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
    mask = frontier_mask(points)
    chosen: dict[tuple[float, float], int] = {}
    for i, on in enumerate(mask):
        if on:
            key = (float(points[i][0]), float(points[i][1]))  # type: ignore[arg-type]
            chosen.setdefault(key, i)
    return [chosen[key] for key in sorted(chosen, key=lambda k: (k[0], -k[1]))]
