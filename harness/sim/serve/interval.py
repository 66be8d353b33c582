"""The 80 % prediction interval of a point served by the simulated server (`repro sweep
--engine sim`): the same `point.json` field (`fidelity.interval80`) that `repro simulate` writes
for its points, from the same calibration (docs/simulator.md §6).

The server resolves its calibration and logs the intervals' log-space sigmas among its start-up
facts (`harness.sim.serve.server.FACTS_PREFIX`); the point's metrics are only known on the
client side, where the record is written, so the interval is computed there: value x
exp(+-1.2816 sigma) by `harness.sim.intervals`, the formula `repro simulate` uses offline.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.sim.intervals import interval80
from harness.sim.serve.process import SimServer
from harness.sim.serve.server import read_facts


def served_interval80(server: SimServer, metrics: Mapping[str, Any]) -> dict[str, list[float]]:
    """The interval of a point the simulated `server` served: empty when it ran uncalibrated
    (it logs no sigma then)."""
    try:
        with open(server.log_path, encoding="utf-8", errors="replace") as log:
            sigma = read_facts(log).get("interval_sigma")
    except OSError:
        return {}
    if not isinstance(sigma, dict):
        return {}
    return interval80({k: float(v) for k, v in sigma.items()}, metrics)
