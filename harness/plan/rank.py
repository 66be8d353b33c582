"""Ranking by goodput per GPU, the `repro capacity` figure of a configuration, and why the
losing arm loses, in numbers taken from the search (docs/plan.md §5)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from harness.plan.arms import ARMS, Config, base_serve
from harness.plan.inputs import PlanRequest
from harness.plan.search import Entry, SearchResult, qualifies

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class CapacityFigure:
    """What the calculator admits for this arm, pool and max-num-seqs at the longest turn."""

    requests: int
    limiter: str
    seq_len: int

    def to_json(self) -> dict[str, Any]:
        return {"requests": self.requests, "limiter": self.limiter, "seq_len": self.seq_len}


def spec_tokens(arm: str) -> int | None:
    spec = base_serve(ARMS[arm].profile).get("speculative-config") or {}
    return int(spec["num_speculative_tokens"]) if spec else None


@lru_cache(maxsize=256)
def capacity_figure(request: PlanRequest, arm: str, pool_gib: float, mns: int) -> CapacityFigure:
    """`repro capacity --gpu G --tp T --seq-len L --max-seqs M [--host-pool-gib P
    --spec-tokens K]`: HiSparse arms read the (MTP-aware) HiSparse limit, offloading arms the
    GPU-resident baseline limit, since an offload pool holds prefixes, not running requests."""
    from harness.capacity.deployment import make_deployment
    from harness.capacity.formulas import evaluate

    hisparse = ARMS[arm].policy == "hisparse"
    dep = make_deployment(
        request.model,
        gpu=request.gpu,
        tp=request.tp,
        max_seqs=mns,
        spec_tokens=spec_tokens(arm) if hisparse else None,
        host_pool_gib=pool_gib if hisparse else None,
    )
    seq = request.traffic.longest
    result = evaluate(dep, seq)
    if not hisparse:
        limiter = "GPU-resident KV" if result.baseline_requests < mns else "max-num-seqs"
        return CapacityFigure(result.baseline_requests, limiter, seq)
    variant = result.mtp or result.default
    return CapacityFigure(variant.hisparse_requests, variant.limiter, seq)


def goodput_per_gpu(request: PlanRequest, entry: Entry) -> float:
    value = entry.goodput_rps
    return 0.0 if value is None else value / request.gpus


def ranked(result: SearchResult) -> list[Entry]:
    """Qualifying configurations, best goodput per GPU first (ties: output tok/s/GPU, then
    the smaller configuration, so the order is total)."""
    request = result.request
    seen: list[Entry] = [e for e in result.entries if qualifies(e.outcome, request)]

    def key(e: Entry) -> tuple[Any, ...]:
        assert e.outcome is not None
        out = e.outcome.metrics.get("output_throughput_per_gpu") or 0.0
        return (-goodput_per_gpu(request, e), -out, e.config)

    return sorted(seen, key=key)


def goodput_interval(request: PlanRequest, entry: Entry) -> list[float] | None:
    """The simulator's 80 % throughput interval carried to goodput (attainment held)."""
    o = entry.outcome
    if o is None or "throughput_per_gpu" not in o.interval80:
        return None
    tput = o.metrics.get("throughput_per_gpu")
    if not tput:
        return None
    low, high = o.interval80["throughput_per_gpu"]
    g = goodput_per_gpu(request, entry)
    return [g * low / tput, g * high / tput]


def decisive_percentile(min_attainment: float) -> int:
    """The percentile that must meet a limit for `min_attainment` of requests (p90 for 0.9)."""
    needed = math.ceil(min_attainment * 100 - 1e-9)
    return next((p for p in PERCENTILES if p >= needed), PERCENTILES[-1])


def best_by_arm(result: SearchResult) -> dict[str, Entry]:
    out: dict[str, Entry] = {}
    for entry in ranked(result):
        out.setdefault(entry.config.arm, entry)
    return out


def closest_by_arm(result: SearchResult, arm: str) -> Entry | None:
    """An arm with no qualifying configuration: its highest attainment, then goodput."""
    tried = [
        e for e in result.entries if e.config.arm == arm and e.outcome is not None and e.outcome.ok
    ]
    if not tried:
        return None

    def key(e: Entry) -> tuple[float, float]:
        assert e.outcome is not None
        return (e.outcome.metrics.get("slo_attainment") or 0.0, e.goodput_rps or 0.0)

    return max(tried, key=key)


def series(result: SearchResult, like: Config) -> list[Entry]:
    """The simulated points of `like`'s arm, pool and max-num-seqs, by concurrency."""
    return sorted(
        (
            e
            for e in result.entries
            if (e.config.arm, e.config.pool_gib, e.config.max_num_seqs)
            == (like.arm, like.pool_gib, like.max_num_seqs)
            and e.outcome is not None
            and e.outcome.ok
        ),
        key=lambda e: e.config.concurrency,
    )
