"""Percentiles and goodput of a point, from its per-request table.

- Percentiles use EvalScope 1.7's rule (floor index ``int(n * p / 100)``, docs/evalscope.md §6), so
  the table's p99 TTFT equals EvalScope's own `benchmark_percentile.json` row before rounding.
  They are over successful requests; ITL percentiles are over every inter-chunk gap of every
  successful request (as `vllm bench serve` reports them).
- Goodput = requests meeting every objective / point duration (first request sent to last byte
  received, EvalScope's `Test Duration`); a failed request never meets them.
  ``slo_attainment`` is the fraction of the point's requests that met them.
- The highest concurrency of an arm that meets the objectives is its highest-concurrency valid
  point whose attainment is at least ``threshold`` (0.9: "for >= 90 % of requests").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from harness.analysis.slo import Objectives

PERCENTILES = (50, 90, 99)
ATTAINMENT_THRESHOLD = 0.9


def percentile(values: Sequence[float], p: float) -> float | None:
    ordered = sorted(v for v in values if v is not None and not math.isnan(v))
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]


def meets(frame: pd.DataFrame, objectives: Objectives) -> pd.Series:
    """Per row: succeeded and at or below every limit given (a missing value does not meet)."""
    ok = frame["success"].astype(bool).copy()
    columns = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "latency_s"}
    for key, limit in objectives.given.items():
        if key == "itl":
            worst = frame["itl_s"].map(lambda gaps: max(gaps) if len(gaps) else 0.0)
            ok &= worst <= limit
        elif key == "tpot":
            # one output token has no TPOT: nothing to miss
            ok &= frame["tpot_s"].isna() | (frame["tpot_s"] <= limit)
        else:
            ok &= frame[columns[key]].notna() & (frame[columns[key]] <= limit)
    return ok


def duration_s(frame: pd.DataFrame) -> float | None:
    ends = frame["end_s"].dropna()
    if frame.empty or ends.empty:
        return None
    span = float(ends.max() - frame["start_s"].min())
    return span if span > 0 else None


def table_metrics(frame: pd.DataFrame, objectives: Objectives | None) -> dict[str, float | None]:
    """p50/p90/p99 of TTFT, TPOT, ITL (ms) and e2e latency (s); goodput with objectives."""
    ok = frame[frame["success"].astype(bool)]
    out: dict[str, float | None] = {}
    series: dict[str, tuple[list[float], float]] = {
        "ttft_ms": (ok["ttft_s"].dropna().tolist(), 1000.0),
        "tpot_ms": (ok["tpot_s"].dropna().tolist(), 1000.0),
        "itl_ms": ([g for gaps in ok["itl_s"] for g in gaps], 1000.0),
        "e2e_s": (ok["latency_s"].dropna().tolist(), 1.0),
    }
    for name, (values, scale) in series.items():
        for p in PERCENTILES:
            value = percentile(values, p)
            out[f"p{p}_{name}"] = value * scale if value is not None else None
    if objectives is not None and objectives.given:
        meeting = int(meets(frame, objectives).sum())
        span = duration_s(frame)
        out["goodput_rps"] = meeting / span if span else None
        out["slo_attainment"] = meeting / len(frame) if len(frame) else None
    return out


def merge_table_metrics(
    metrics: dict[str, float | None], extra: dict[str, float | None]
) -> dict[str, float | None]:
    """The point's metrics plus the table's; EvalScope's own p99 rows are kept where present."""
    merged = dict(metrics)
    for key, value in extra.items():
        if merged.get(key) is None:
            merged[key] = value
    return merged


def max_concurrency_meeting(
    points: Iterable[Any], threshold: float = ATTAINMENT_THRESHOLD
) -> int | None:
    """Highest `parallel` of the valid points whose `slo_attainment` >= threshold."""
    best = None
    for point in points:
        value = point.metrics.get("slo_attainment")
        if point.valid and value is not None and value >= threshold:
            best = point.parallel if best is None else max(best, point.parallel)
    return best


def meeting_slo(groups: Sequence[Sequence[Any]], threshold: float = ATTAINMENT_THRESHOLD):
    """The point groups (repeats of one point, in concurrency order) whose median attainment
    over valid repeats is at least ``threshold``."""
    out = []
    for group in groups:
        values = [
            float(v)
            for p in group
            if p.valid and (v := p.metrics.get("slo_attainment")) is not None
        ]
        if values and statistics.median(values) >= threshold:
            out.append(group)
    return out
