"""Background poller of a vLLM server's Prometheus `/metrics` endpoint.

Parsing is prometheus_client's (`text_string_to_metric_families`), never by hand.  Every sample
keeps its *sample* name (counters keep `_total`, see docs/pitfalls.md), its labels, the epoch
time and the monotonic time of the scrape — the monotonic clock is what EvalScope's sqlite uses
(`time.perf_counter()` is CLOCK_MONOTONIC on Linux), so requests and samples join exactly.

A scrape that fails, returns non-200 or exceeds its timeout is recorded as a gap; it never raises
into the point that is being measured.
"""

from __future__ import annotations

import csv
import io
import json
import threading
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import requests
from prometheus_client.parser import text_string_to_metric_families

from harness import metric_names as mn
from harness.measurement import Sample
from harness.results import atomic_write_text

SAMPLE_COLUMNS = ("timestamp", "monotonic", "name", "labels", "value")
KEEP_PREFIX = "vllm:"


@dataclass
class Gap:
    timestamp: float
    monotonic: float
    reason: str


def parse_metrics(text: str, *, timestamp: float, monotonic: float) -> list[Sample]:
    """Samples of the `vllm:` families; `_created` samples are dropped (they are not data)."""
    out: list[Sample] = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.startswith(KEEP_PREFIX) or sample.name.endswith("_created"):
                continue
            out.append(
                Sample(timestamp, monotonic, sample.name, dict(sample.labels), float(sample.value))
            )
    return out


@dataclass
class Scraper:
    """Polls `metrics_url` every `interval_s` seconds in a daemon thread between start() and stop().

    `scrape_now()` takes one synchronous sample (used for the start and end samples of a point).
    """

    metrics_url: str
    interval_s: float
    timeout_s: float | None = None
    samples: list[Sample] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    scrapes_ok: int = 0
    last_running: float | None = None  # sum over engines of num_requests_running, last scrape

    def __post_init__(self) -> None:
        if self.timeout_s is None:
            # A slow scrape must not stall the schedule for long, but a loaded 2-core CPU server
            # can take a while to render ~600 lines.
            self.timeout_s = min(max(self.interval_s, 2.0), 10.0)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._session = requests.Session()
        self._session.trust_env = False  # loopback: never through a proxy

    def scrape_now(self) -> bool:
        try:
            response = self._session.get(self.metrics_url, timeout=self.timeout_s)
            now, mono = time.time(), time.monotonic()
            if response.status_code != 200:
                self._gap(now, mono, f"HTTP {response.status_code}")
                return False
            parsed = parse_metrics(response.text, timestamp=now, monotonic=mono)
        except Exception as exc:  # noqa: BLE001 - any failure is a gap, never fatal
            self._gap(time.time(), time.monotonic(), f"{type(exc).__name__}: {exc}"[:300])
            return False
        running = [s.value for s in parsed if s.name == mn.NUM_REQUESTS_RUNNING]
        with self._lock:
            self.samples.extend(parsed)
            self.scrapes_ok += 1
            self.last_running = sum(running) if running else None
        return True

    def _gap(self, now: float, mono: float, reason: str) -> None:
        with self._lock:
            self.gaps.append(Gap(now, mono, reason))

    def _loop(self) -> None:
        next_at = time.monotonic() + self.interval_s
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            self.scrape_now()
            next_at = max(next_at + self.interval_s, time.monotonic())

    def start(self) -> Scraper:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="metrics-scraper", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            # A scrape in flight ends within its timeout.
            self._thread.join(timeout=(self.timeout_s or 10.0) + 5.0)
            self._thread = None

    def snapshot(self) -> tuple[list[Sample], list[Gap]]:
        with self._lock:
            return list(self.samples), list(self.gaps)


def write_samples_csv(path: Path, samples: Iterable[Sample]) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(SAMPLE_COLUMNS)
    for s in samples:
        writer.writerow(
            [
                repr(s.timestamp),
                repr(s.monotonic),
                s.name,
                json.dumps(s.labels, sort_keys=True),
                repr(s.value),
            ]
        )
    atomic_write_text(path, buffer.getvalue())


def read_samples_csv(path: Path, names: Collection[str] | None = None) -> list[Sample]:
    """The samples of a samples.csv, or only those of metrics named in `names` (malformed
    rows skipped: :func:`read_samples_counted` says how many)."""
    return read_samples_counted(path, names)[0]


def read_samples_counted(
    path: Path, names: Collection[str] | None = None
) -> tuple[list[Sample], int]:
    """(samples, malformed rows). One bad line (not UTF-8, a NUL, a short row, labels that are
    not a JSON object, a value that is not a number) is counted and skipped, never fatal: the
    other rows of a 3-hour point are still worth a panel. Each line is one row (the writer
    quotes no newline: labels are compact JSON)."""
    out: list[Sample] = []
    bad = 0
    with open(path, "rb") as handle:
        header = handle.readline()
        if header.rstrip(b"\r\n").decode("utf-8", "replace").split(",") != list(SAMPLE_COLUMNS):
            bad += 1 if header else 0  # the first row is data or garbage: counted, not trusted
        for raw in handle:
            sample = _sample_row(raw, names)
            if sample is None:
                continue
            if isinstance(sample, Sample):
                out.append(sample)
            else:  # False: a malformed row (_sample_row never returns True)
                bad += 1
    return out, bad


def _sample_row(raw: bytes, names: Collection[str] | None) -> Sample | bool | None:
    """The row as a Sample, None when its metric is not wanted, False when it is malformed."""
    try:
        if b"\x00" in raw:
            return False
        (row,) = list(csv.reader([raw.decode("utf-8").rstrip("\r\n")]))
        if len(row) != len(SAMPLE_COLUMNS):
            return False
        if names is not None and row[2] not in names:
            return None
        labels = json.loads(row[3])
        if not isinstance(labels, dict):
            return False
        return Sample(float(row[0]), float(row[1]), row[2], labels, float(row[4]))
    except (UnicodeDecodeError, ValueError, csv.Error, RecursionError):
        return False
