"""/metrics of the simulated server: vLLM's names (docs/vllm.md §3) through
prometheus_client, from its own CollectorRegistry, labelled engine="0" and model_name.

Gauges and counters are read from the engine at scrape time under the engine lock (so a scrape
sees a state between two steps, as vLLM's logger does); the request histograms are observed
when a request finishes, in virtual seconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from harness import metric_names as mn
from harness.sim.serve.live import Handle, LiveEngine

LABELS = ("model_name", "engine")


def _buckets(edges: str) -> tuple[float, ...]:
    return tuple(float(x) for x in edges.split())


TPOT_BUCKETS = _buckets(
    "0.01 0.025 0.05 0.075 0.1 0.15 0.2 0.3 0.4 0.5 0.75 1.0 2.5 5.0 7.5 10.0 20.0 40.0 80.0"
)
TTFT_BUCKETS = _buckets(
    "0.001 0.005 0.01 0.02 0.04 0.06 0.08 0.1 0.25 0.5 0.75 1.0 2.5 5.0 7.5 10.0 20.0 40.0 80.0 160.0 640.0 2560.0"
)
E2E_BUCKETS = _buckets(
    "0.3 0.5 0.8 1.0 1.5 2.0 2.5 5.0 10.0 15.0 20.0 30.0 40.0 50.0 60.0 120.0 240.0 480.0 960.0 1920.0 7680.0"
)
HELP = {
    mn.NUM_REQUESTS_RUNNING: "Number of requests in model execution batches.",
    mn.NUM_REQUESTS_WAITING: "Number of requests waiting to be processed.",
    mn.KV_CACHE_USAGE_PERC: "KV-cache usage. 1 means 100 percent usage.",
    mn.HISPARSE_HOST_CACHE_USAGE_PERC: "HiSparse host pool usage.",
}


LAG_HELP = "Virtual seconds the simulated engine fell behind the wall clock x time scale"
ARRIVAL_LAG_HELP = (
    "Virtual seconds the busy engine was behind the wall clock when requests arrived, summed"
)


class _EngineCollector(Collector):
    def __init__(self, live: LiveEngine, labels: dict[str, str], extra: dict[str, str]) -> None:
        self.live = live
        self.values = [labels[k] for k in LABELS]
        self.extra = extra  # cache_config_info labels

    def collect(self) -> Iterator[Any]:
        with self.live.lock:
            gauges = self.live.engine.gauges()
            counters = self.live.engine.counters()
            lag = self.live.lag_s
            behind = self.live.behind_at_arrival_s
        for name, value in gauges.items():
            family = GaugeMetricFamily(name, HELP.get(name, name), labels=LABELS)
            family.add_metric(self.values, float(value))
            yield family
        for name, value in counters.items():
            counter = CounterMetricFamily(name.removesuffix("_total"), name, labels=LABELS)
            counter.add_metric(self.values, float(value))
            yield counter
        info = GaugeMetricFamily(
            mn.CACHE_CONFIG_INFO,
            "Information of the LLMEngine CacheConfig",
            labels=list(self.extra),
        )
        info.add_metric(list(self.extra.values()), 1.0)
        yield info
        for name, text, value in (
            ("repro:sim_lag_seconds", LAG_HELP, lag),
            ("repro:sim_arrival_lag_seconds", ARRIVAL_LAG_HELP, behind),
        ):
            lagged = CounterMetricFamily(name, text, labels=LABELS)
            lagged.add_metric(self.values, value)
            yield lagged


class SimMetrics:
    def __init__(self, live: LiveEngine, labels: dict[str, str], info: dict[str, str]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_EngineCollector(live, labels, info))
        self.values = [labels[k] for k in LABELS]

        def hist(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, LABELS, registry=self.registry, buckets=buckets)

        self.tpot = hist(
            mn.REQUEST_TIME_PER_OUTPUT_TOKEN_SECONDS,
            "Histogram of time_per_output_token_seconds per request.",
            TPOT_BUCKETS,
        )
        self.ttft = hist(
            mn.TIME_TO_FIRST_TOKEN_SECONDS,
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
        )
        self.e2e = hist(
            mn.E2E_REQUEST_LATENCY_SECONDS,
            "Histogram of e2e request latency in seconds.",
            E2E_BUCKETS,
        )

        self.inference = hist(
            mn.REQUEST_INFERENCE_TIME_SECONDS,
            "Histogram of time spent in RUNNING phase for request.",
            E2E_BUCKETS,
        )

    def observe(self, h: Handle) -> None:
        if h.tpot_s is not None:
            self.tpot.labels(*self.values).observe(h.tpot_s)
        if h.ttft_s is not None:
            self.ttft.labels(*self.values).observe(h.ttft_s)
        if h.e2e_s is not None:
            self.e2e.labels(*self.values).observe(h.e2e_s)
        if h.inference_s is not None:
            self.inference.labels(*self.values).observe(h.inference_s)

    def render(self) -> bytes:
        return generate_latest(self.registry)
