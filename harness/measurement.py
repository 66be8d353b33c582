"""What one point measured, in this project's own terms, whoever produced it: the per-request
records, the scraped `/metrics` series and the client's summary. The EvalScope adapter
(`harness.client.evalscope`) and the scraper (`harness.client.scrape`) fill it from their
sources; the offline simulator (`harness.sim.run`) fills it directly; `harness.run.validity`
judges it and `harness.analysis.metrics` derives the point's metrics from it. Nothing here knows
a client's file format (docs/architecture.md, "The point pipeline").

Units follow the project's metric names (`harness.results.METRICS`): per-request times are
seconds; the client's TTFT, TPOT and inter-token percentiles are milliseconds, its end-to-end
latency percentiles seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.results import ClientSummary


@dataclass(frozen=True)
class Sample:
    """One `/metrics` sample."""

    timestamp: float  # epoch s (time.time()) when the scrape's response arrived
    monotonic: float  # time.monotonic() at the same instant
    name: str  # the sample name as exposed (a counter's ends in _total; harness.metric_names)
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class RequestRecord:
    """One request (one turn) as the client saw it. Times are seconds on the client's monotonic
    clock (the clock of the samples' `monotonic`), as measured: a served simulation's time
    scale is applied by the readers (`Measurement.time_scale`), never here."""

    start: float
    end: float | None  # last byte (a failed request's end when the client recorded one)
    success: bool
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    conversation: int | None = None  # dataset index; negative: not matched to the dataset
    turn: int | None = None  # 1-based
    ttft: float | None = None  # time to first token
    itl: tuple[float, ...] = ()  # inter-token (inter-chunk) gaps
    think: float | None = None  # the pause drawn before this turn (None: not recorded)
    server_cached: int | None = None  # the server's cached prompt tokens, when it said
    error: str | None = None  # why it failed, when the client says

    @property
    def latency(self) -> float | None:
        return self.end - self.start if self.end is not None else None

    @property
    def tpot(self) -> float | None:
        """(latency - TTFT) / (output tokens - 1); None with one output token or fewer."""
        if self.end is None or self.ttft is None or not self.output_tokens:
            return None
        if self.output_tokens <= 1:
            return None
        return (self.end - self.start - self.ttft) / (self.output_tokens - 1)


@dataclass(frozen=True)
class Percentiles:
    """Percentiles of one per-request quantity over the point's successful requests."""

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None

    def scaled(self, factor: float) -> Percentiles:
        return Percentiles(*(None if v is None else v * factor for v in self.values()))

    def values(self) -> tuple[float | None, float | None, float | None]:
        return (self.p50, self.p90, self.p99)


@dataclass(frozen=True)
class ClientPercentiles:
    """The client's own percentile table (the means are in `ClientSummary`)."""

    ttft_ms: Percentiles = Percentiles()
    tpot_ms: Percentiles = Percentiles()
    itl_ms: Percentiles = Percentiles()
    latency_s: Percentiles = Percentiles()

    def time_scaled(self, k: float) -> ClientPercentiles:
        """Every time x K (a served simulation's clock ran K x faster than the wall clock)."""
        if k == 1.0:
            return self
        return ClientPercentiles(
            ttft_ms=self.ttft_ms.scaled(k),
            tpot_ms=self.tpot_ms.scaled(k),
            itl_ms=self.itl_ms.scaled(k),
            latency_s=self.latency_s.scaled(k),
        )


_SUMMARY_TIMES = ("duration_s", "mean_latency_s", "mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms")
_SUMMARY_RATES = ("request_throughput", "output_throughput", "total_throughput")


def time_scaled_summary(client: ClientSummary | None, k: float) -> ClientSummary | None:
    """Client-side times x K, rates / K: the simulated server ran K x faster than real time.
    The summary's `raw` records the factor (`repro_time_scale`)."""
    if client is None or k == 1.0:
        return client
    data = client.model_dump()
    for key in _SUMMARY_TIMES:
        if data.get(key) is not None:
            data[key] *= k
    for key in _SUMMARY_RATES:
        if data.get(key) is not None:
            data[key] /= k
    data["raw"] = {**data.get("raw", {}), "repro_time_scale": k}
    return ClientSummary.model_validate(data)


@dataclass(frozen=True)
class Measurement:
    """A point's raw measurement: requests, samples and the client's own summary.

    `client` and `percentiles` are in the engine's time (already x `time_scale`); `requests`
    keep the client's clock so that they join the samples; `epoch_offset` maps that clock to
    the epoch. `problems` are what the reader could not read (each makes the point invalid)."""

    client_name: str  # who measured, as a reason names it ("EvalScope", ...)
    requests: tuple[RequestRecord, ...] = ()
    samples: tuple[Sample, ...] = ()
    client: ClientSummary | None = None
    percentiles: ClientPercentiles = ClientPercentiles()
    time_scale: float = 1.0
    epoch_offset: float | None = None
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # what the reader noticed that is not a fault

    @property
    def window(self) -> tuple[float, float] | None:
        """First request sent .. last response received, on the client's clock (None: no
        request with an end)."""
        ends = [r.end for r in self.requests if r.end is not None]
        if not self.requests or not ends:
            return None
        return (min(r.start for r in self.requests), max(ends))
