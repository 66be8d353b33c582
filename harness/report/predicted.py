"""Predicted beside measured (`repro report RUN --predicted SIMRUN`): one table per simulated
run with, for every point of the real run it predicts, the capacity model's static limit, the
simulator's prediction and the measurement.

The static limit is read from the simulated run's manifest (`build.setup`), which recorded the
pool the simulator was given: a CPU parity run's usable blocks, block size and longest request
(the baseline limit of `harness.capacity.formulas.capacity_at`), or a GPU run's calculator
limits at 80K tokens for its policy. No number is recomputed here.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from harness.errors import RunError
from harness.report.bands import interval_of
from harness.results import PointRecord, Run

# (metric key, column label, format)
COLUMNS = (
    ("occupancy", "occupancy", ".2f"),
    ("engine_occupancy", "engine occupancy", ".2f"),
    ("waiting_mean", "waiting mean", ".2f"),
    ("waiting_max", "waiting max", ".0f"),
    ("preemptions", "preemptions", ".3g"),
    ("interactivity", "interactivity", ".1f"),
    ("throughput_per_gpu", "tok/s per GPU", ".0f"),
)


def static_limit(sim: Run) -> tuple[int | None, str]:
    """(limit, how it was obtained) from a simulated run's recorded setup."""
    setup = (sim.manifest.build or {}).get("setup") or {}
    pool, bt = setup.get("pool_units"), setup.get("block_tokens")
    seq, seqs = setup.get("longest_request_tokens"), setup.get("max_num_seqs")
    if all(isinstance(x, int) and x > 0 for x in (pool, bt, seq, seqs)):
        pool, bt, seq, seqs = cast(tuple[int, int, int, int], (pool, bt, seq, seqs))
        limit = min(seqs, pool // -(-seq // bt))
        return limit, f"{pool} blocks // ceil({seq} tokens / {bt}), max-num-seqs {seqs}"
    key = "hisparse_limit_at_80k" if setup.get("policy") == "hisparse" else "baseline_limit_at_80k"
    value = setup.get(key)
    if isinstance(value, int):
        return value, f"capacity model {key.replace('_', ' ')}"
    return None, "no pool recorded in the simulated run"


def _fmt(value: Any, spec: str) -> str:
    return "–" if not isinstance(value, int | float) else format(value, spec)


def _error(pred: Any, meas: Any) -> str:
    if not isinstance(pred, int | float) or not isinstance(meas, int | float) or not meas:
        return "–"
    return f"{100.0 * (pred - meas) / meas:+.0f}%"


def _matched(real: Run, sim: Run) -> list[tuple[PointRecord, PointRecord]]:
    by_key = {(p.parallel, p.number, p.repeat): p for p in sim.points}
    return [
        (p, by_key[(p.parallel, p.number, p.repeat)])
        for p in real.points
        if (p.parallel, p.number, p.repeat) in by_key
    ]


def predicted_table(real: Run, sim: Run) -> dict[str, Any]:
    """Rows of limit / predicted / measured per matched point; RunError when none match."""
    if not sim.manifest.simulated:
        raise RunError(
            f"--predicted {sim.root}: not a simulated run (engine {sim.manifest.engine!r})"
        )
    if real.manifest.simulated:
        raise RunError(f"{real.root}: --predicted overlays a simulation on a *real* run")
    pairs = _matched(real, sim)
    if not pairs:
        raise RunError(
            f"--predicted {sim.root}: no point in common with {real.root} "
            "(points are matched by concurrency, conversations and repeat)"
        )
    limit, how = static_limit(sim)
    rows = []
    for meas, pred in pairs:
        cells = []
        for key, _, spec in COLUMNS:
            p, m = predicted_value(pred, key), meas.metrics.get(key)
            band = interval_of(pred, key)
            shown = _fmt(p, spec) + (
                f" ({_fmt(band[0], spec)}–{_fmt(band[1], spec)})" if band else ""
            )
            cells.append({"predicted": shown, "measured": _fmt(m, spec), "error": _error(p, m)})
        rows.append(
            {"label": meas.label, "point": meas.point_id, "limit": _fmt(limit, "d"), "cells": cells}
        )
    return {
        "real": real.manifest.run_id,
        "sim": sim.manifest.run_id,
        "limit_how": how,
        "calibration": sim.manifest.calibration or "not recorded",
        "columns": [label for _, label, _ in COLUMNS],
        "rows": rows,
        "coverage": coverage(pairs),
    }


def predicted_value(pred: PointRecord, key: str) -> Any:
    """The simulated point's value; for preemptions the mean of its seeded replays where it has
    them (a CPU parity prediction, harness/sim/parity_spread.py)."""
    if key == "preemptions":
        mean = (pred.fidelity.get("ensemble") or {}).get("preemptions_mean")
        if isinstance(mean, int | float):
            return mean
    return pred.metrics.get(key)


def coverage(pairs: Sequence[tuple[PointRecord, PointRecord]]) -> list[str]:
    """Per metric with intervals: how many measured values fall inside the simulated point's
    80 % interval, and the intervals' median half-width (relative to the prediction)."""
    lines = []
    for key, label, _ in COLUMNS:
        inside, widths = 0, []
        for meas, pred in pairs:
            band, p, m = interval_of(pred, key), predicted_value(pred, key), meas.metrics.get(key)
            if band is None or not isinstance(p, int | float) or not isinstance(m, int | float):
                continue
            inside += band[0] <= m <= band[1]
            widths.append((band[1] - band[0]) / 2 / p if p else 0.0)
        if widths:
            lines.append(
                f"{label}: {inside} of {len(widths)} measured inside the 80 % interval "
                f"(median half-width {100 * statistics.median(widths):.1f} %)"
            )
    return lines


def predicted_tables(reals: Sequence[Run], sims: Sequence[Run]) -> list[dict[str, Any]]:
    """Each simulated run against the real run it says it predicts (manifest `build.predicts`),
    else against the first real run."""
    out = []
    for sim in sims:
        target = (sim.manifest.build or {}).get("predicts")
        real = next(
            (r for r in reals if target and Path(r.root).resolve() == Path(target).resolve()),
            reals[0],
        )
        out.append(predicted_table(real, sim))
    return out
