"""What one point measured, in this project's own terms, whoever produced it: the per-request
records, the scraped `/metrics` series and the client's summary. The EvalScope adapter
(`harness.client.evalscope`) and the scraper (`harness.client.scrape`) fill it from their
sources; the offline simulator fills it directly; `harness.analysis.metrics` derives the point's
metrics from it. Nothing here knows a client's file format."""

from __future__ import annotations

from dataclasses import dataclass, field

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
class RequestTiming:
    """One request (one turn), times on the monotonic clock (perf_counter)."""

    start: float
    end: float | None
    success: bool
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass
class Measurement:
    """A point's raw measurement: requests, samples and the client's own summary."""

    requests: list[RequestTiming] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    client: ClientSummary | None = None
