"""Pure derivation of every per-point metric in `harness.results.METRICS`.

The input is data, not servers: one point's :class:`harness.measurement.Measurement` (its
`/metrics` samples, the client's summary and percentiles, the per-request records), whichever
engine and client produced it.  Rules (see docs/vllm.md §3 and docs/pitfalls.md):

- gauges: per scrape, summed over series (i.e. over `engine`) — except `kv_cache_usage_perc`,
  which takes the max over engines; then mean/max over the scrapes of the point window;
- occupancy: mean of the *non-zero* per-scrape sums of the running-requests gauge; null (never
  0) when no scrape saw a running request;
- engine occupancy: the increase of the inference-time histogram's sum (each finished request's
  time from first scheduled to last token) over the span of the point's requests: every
  request counts, where the gauge is sampled and, on a fast server, may see a handful of them;
- counters: per series (name + labels), increases between consecutive scrapes, where a drop is a
  reset (restarted server) and the increase after it is the new value itself; summed over series.
  Counter sample names end in `_total`; both `X_total` and `X` are accepted;
- a ratio with a zero or missing denominator is null.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness import metric_names as mn
from harness.measurement import ClientPercentiles, Measurement, RequestRecord, Sample
from harness.results import METRICS, ClientSummary

GIB = float(1 << 30)


@dataclass
class DerivedMetrics:
    metrics: dict[str, float | None]
    counter_resets: int = 0
    scrapes: int = 0  # distinct scrape instants in the samples
    info: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- sample helpers


def _series_key(sample: Sample) -> str:
    return sample.name + json.dumps(sample.labels, sort_keys=True)


def _names(name: str) -> tuple[str, ...]:
    base = name.removesuffix("_total")
    return (base + "_total", base)


def _matches(sample: Sample, names: tuple[str, ...], where: dict[str, str] | None) -> bool:
    if sample.name not in names:
        return False
    return not where or all(sample.labels.get(k) == v for k, v in where.items())


def gauge_per_scrape(
    samples: Iterable[Sample],
    name: str,
    *,
    combine: str = "sum",
    where: dict[str, str] | None = None,
) -> list[tuple[float, float]]:
    """[(monotonic, value)] per scrape instant, combining series (engines) by sum or max."""
    by_time: dict[float, list[float]] = defaultdict(list)
    for s in samples:
        if s.name == name and (not where or all(s.labels.get(k) == v for k, v in where.items())):
            by_time[s.monotonic].append(s.value)
    fold = max if combine == "max" else sum
    return [(t, float(fold(v))) for t, v in sorted(by_time.items())]


def occupancy_by_phase(running: Sequence[tuple[float, float]], period_s: int) -> dict[int, float]:
    """The occupancy a scraper every `period_s` seconds would read, per whole-second phase.

    `running` is the summed running gauge [(time, value)] from a 1 s scrape starting at the
    point's start; phase k keeps the samples k, k + period_s, ... seconds in. A phase that sees
    no running request is left out (its occupancy is null). A short point gives a long period a
    handful of samples, so the phase decides the reading (docs/simulator.md §6a)."""
    if not running:
        return {}
    start = running[0][0]
    seen: dict[int, list[float]] = defaultdict(list)
    for t, value in running:
        if value > 0:
            seen[round(t - start) % period_s].append(value)
    return {phase: sum(v) / len(v) for phase, v in sorted(seen.items())}


def counter_increase(before: float, after: float) -> float:
    """Increase of one counter series between two scrapes. A drop is a reset (the server
    restarted): the counter started again from 0, so its new value is the whole increase."""
    return after - before if after >= before else after


def counter_series(
    samples: Iterable[Sample],
    name: str,
    *,
    where: dict[str, str] | None = None,
    clock: str = "monotonic",
) -> list[list[tuple[float, float]]]:
    """[(time, value)] per series (name + labels) of a counter, sorted by time (``clock``:
    the samples' ``monotonic`` or ``timestamp``)."""
    names = _names(name)
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in samples:
        if _matches(s, names, where):
            series[_series_key(s)].append((getattr(s, clock), s.value))
    return [sorted(points) for points in series.values()]


def counter_delta(
    samples: Iterable[Sample], name: str, *, where: dict[str, str] | None = None
) -> tuple[float | None, int]:
    """(increase over the window summed over series, resets seen); None when never sampled."""
    series = counter_series(samples, name, where=where)
    if not series:
        return None, 0
    total, resets = 0.0, 0
    for points in series:
        for (_, before), (_, after) in itertools.pairwise(points):
            total += counter_increase(before, after)
            resets += after < before
    return total, resets


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return num / den


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


# --------------------------------------------------------------------------- client helpers


def client_in_flight_mean(requests: Sequence[RequestRecord]) -> float | None:
    """Time-weighted mean of in-flight requests over [first start, last end] (the point window)."""
    spans = [(r.start, r.end) for r in requests if r.end is not None and r.end >= r.start]
    if not spans:
        return None
    begin = min(s for s, _ in spans)
    end = max(e for _, e in spans)
    if end <= begin:
        return None
    return sum(e - s for s, e in spans) / (end - begin)


def request_span_s(
    requests: Sequence[RequestRecord], client: ClientSummary | None, time_scale: float = 1.0
) -> float | None:
    """From the first request's start to the last one's end, x `time_scale` (request records
    keep the client's wall clock; the server's histograms run K x faster on the simulated
    engine); the client's duration (already scaled) without request records."""
    spans = [(r.start, r.end) for r in requests if r.end is not None and r.end >= r.start]
    if spans:
        return (max(e for _, e in spans) - min(s for s, _ in spans)) * time_scale
    return client.duration_s if client is not None else None


def in_flight_at(requests: Sequence[RequestRecord], t: float) -> int:
    return sum(1 for r in requests if r.end is not None and r.start <= t < r.end)


# --------------------------------------------------------------------------- the derivation


def _client_metrics(
    m: dict[str, float | None],
    client: ClientSummary | None,
    percentiles: ClientPercentiles,
    *,
    divisor: int,
    parallel: int,
) -> None:
    """The metrics the client measures (blog definitions)."""
    if client is not None:
        tpot = client.mean_tpot_ms
        m["interactivity"] = 1000.0 / tpot if tpot else None
        m["mean_tpot_ms"] = tpot
        m["mean_ttft_ms"] = client.mean_ttft_ms
        m["mean_itl_ms"] = client.mean_itl_ms
        if client.total_throughput is not None:
            m["throughput_per_gpu"] = client.total_throughput / divisor
        if client.output_throughput is not None:
            m["output_throughput_per_gpu"] = client.output_throughput / divisor
            m["output_tps_per_user"] = client.output_throughput / max(parallel, 1)
        m["request_throughput"] = client.request_throughput
        if client.kv_cache_hit_rate_pct is not None:
            m["client_kv_cache_hit_rate"] = client.kv_cache_hit_rate_pct / 100.0
        m["duration_s"] = client.duration_s
    m["p99_ttft_ms"] = percentiles.ttft_ms.p99
    m["p99_tpot_ms"] = percentiles.tpot_ms.p99


def derive_point_metrics(measured: Measurement, *, parallel: int, gpus: int) -> DerivedMetrics:
    """Every METRICS key (None when not measurable) from one point's measurement."""
    samples, requests = measured.samples, measured.requests
    divisor = max(gpus, 1)
    m: dict[str, float | None] = dict.fromkeys(METRICS)

    _client_metrics(m, measured.client, measured.percentiles, divisor=divisor, parallel=parallel)

    running = gauge_per_scrape(samples, mn.NUM_REQUESTS_RUNNING)
    nonzero = [v for _, v in running if v > 0]
    m["occupancy"] = _mean(nonzero)
    waiting = [v for _, v in gauge_per_scrape(samples, mn.NUM_REQUESTS_WAITING)]
    m["waiting_mean"] = _mean(waiting)
    m["waiting_max"] = max(waiting) if waiting else None
    kv = [v for _, v in gauge_per_scrape(samples, mn.KV_CACHE_USAGE_PERC, combine="max")]
    m["kv_cache_usage_mean"] = _mean(kv)
    m["kv_cache_usage_max"] = max(kv) if kv else None

    resets: list[int] = []

    def delta(name: str, where: dict[str, str] | None = None) -> float | None:
        value, n = counter_delta(samples, name, where=where)
        resets.append(n)
        return value

    tpot_sum = delta(mn.hist_sum(mn.REQUEST_TIME_PER_OUTPUT_TOKEN_SECONDS))
    tpot_count = delta(mn.hist_count(mn.REQUEST_TIME_PER_OUTPUT_TOKEN_SECONDS))
    server_tpot = _ratio(tpot_sum, tpot_count)
    m["server_tpot_ms"] = server_tpot * 1000.0 if server_tpot is not None else None

    drafts = delta(mn.SPEC_DECODE_NUM_DRAFTS)
    draft_tokens = delta(mn.SPEC_DECODE_NUM_DRAFT_TOKENS)
    accepted = delta(mn.SPEC_DECODE_NUM_ACCEPTED_TOKENS)
    per_draft = _ratio(accepted, drafts)
    m["mtp_acceptance_length"] = 1.0 + per_draft if per_draft is not None else None
    m["spec_acceptance_rate"] = _ratio(accepted, draft_tokens)

    engine_s = delta(mn.hist_sum(mn.REQUEST_INFERENCE_TIME_SECONDS))
    span = request_span_s(requests, measured.client, measured.time_scale)
    m["engine_occupancy"] = _ratio(engine_s, span)

    m["preemptions"] = delta(mn.NUM_PREEMPTIONS)
    m["prefix_cache_hit_rate"] = _ratio(delta(mn.PREFIX_CACHE_HITS), delta(mn.PREFIX_CACHE_QUERIES))

    # Hot-buffer counters move only every 2,000 worker steps: a window without an update is 0/0,
    # which is "not measured" (null), never a 0 % hit rate; `info` says how coarse it was.
    hits, misses = delta(mn.HISPARSE_CACHE_HITS), delta(mn.HISPARSE_CACHE_MISSES)
    looked_up = (hits or 0.0) + (misses or 0.0)
    m["hisparse_hit_rate"] = hits / looked_up if hits is not None and looked_up > 0 else None
    h2d = delta(mn.HISPARSE_HOST_TO_DEVICE_BYTES)
    m["hisparse_h2d_gib"] = h2d / GIB if h2d is not None else None

    load = delta(mn.KV_OFFLOAD_LOAD_BYTES)
    if load is None:  # the older, deprecated form
        load = delta(mn.KV_OFFLOAD_TOTAL_BYTES, {"transfer_type": "CPU_to_GPU"})
    store = delta(mn.KV_OFFLOAD_STORE_BYTES)
    if store is None:  # label values are exact-case (vllm offloading/metrics.py)
        store = delta(mn.KV_OFFLOAD_TOTAL_BYTES, {"transfer_type": "GPU_to_CPU"})
    m["offload_load_gib"] = load / GIB if load is not None else None
    m["offload_store_gib"] = store / GIB if store is not None else None

    if requests:
        m["client_in_flight_mean"] = client_in_flight_mean(requests)

    info: dict[str, Any] = {
        "running_samples": len(running),
        "running_nonzero_samples": len(nonzero),
        **_hisparse_gauges(samples, m),
    }
    if hits is not None:
        info["hisparse_counter_updates"] = _counter_updates(samples, mn.HISPARSE_CACHE_HITS)
        info["hisparse_hit_rate_coarse"] = info["hisparse_counter_updates"] < 2
    if requests and running:
        # Client in-flight count at the instants the gauge was sampled (same monotonic clock).
        pairs = [(v, in_flight_at(requests, t)) for t, v in running if v > 0]
        if pairs:
            info["client_in_flight_at_nonzero_scrapes_mean"] = _mean([c for _, c in pairs])
    scrapes = len({s.monotonic for s in samples})
    return DerivedMetrics(
        metrics=m, counter_resets=max(resets, default=0), scrapes=scrapes, info=info
    )


def _counter_updates(samples: Iterable[Sample], name: str) -> int:
    """How many scrape-to-scrape changes one counter shows (summed over series)."""
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in samples:
        if _matches(s, _names(name), None):
            series[_series_key(s)].append((s.monotonic, s.value))
    return sum(
        sum(1 for (_, a), (_, b) in itertools.pairwise(sorted(points)) if a != b)
        for points in series.values()
    )


def _hisparse_gauges(samples: Sequence[Sample], m: dict[str, float | None]) -> dict[str, Any]:
    """The 0.32+ host-tier gauges (once per engine step; absent on 0.30/0.31 and forks)."""
    usage = [
        v for _, v in gauge_per_scrape(samples, mn.HISPARSE_HOST_CACHE_USAGE_PERC, combine="max")
    ]
    pending = [v for _, v in gauge_per_scrape(samples, mn.HISPARSE_PENDING_PAGE_TRANSFERS)]
    m["hisparse_host_cache_usage_mean"] = _mean(usage)
    m["hisparse_host_cache_usage_max"] = max(usage) if usage else None
    m["hisparse_pending_transfers_mean"] = _mean(pending)
    m["hisparse_pending_transfers_max"] = max(pending) if pending else None
    return {"hisparse_gauge_samples": len(usage)}
