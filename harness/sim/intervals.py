"""The simulator's 80 % prediction interval of a point's headline metrics, from the log-space
sigmas its calibration carries (docs/simulator.md §6): one formula for both engines, the offline
`repro simulate` and the HTTP-served simulator."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

Z80 = 1.2816  # two-sided 80 % interval of a normal: +-1.2816 sigma


def interval80(sigma: Mapping[str, float], metrics: Mapping[str, Any]) -> dict[str, list[float]]:
    """Each metric with a sigma and a positive value: [value x exp(-Z80 sigma), value x
    exp(+Z80 sigma)]."""
    out = {}
    for name, s in sigma.items():
        value = metrics.get(name)
        if isinstance(value, int | float) and value > 0:
            out[name] = [value * math.exp(-Z80 * s), value * math.exp(Z80 * s)]
    return out
