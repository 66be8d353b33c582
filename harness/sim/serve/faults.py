"""Failures the simulated server can be told to produce, to test a sweep's failure handling.

Request-level faults are deterministic (the n-th chat request fails when floor((n+1) f) >
floor(n f)), so a run with a fraction f fails exactly round(N f) of N requests, the same ones
every time. They hit streaming requests only (a benchmark client streams; readiness checks and
the harness's warm-ups do not), and none during the first `after_s` wall seconds or the first
`after_requests` streams.

Process-level faults can be timed in wall seconds or, for tests whose verdict must not depend on
the machine's speed, by counted events: the server dies (or /metrics hangs) when a given number
of streams have started, so the fault lands at the same request of a point on any machine.
"""

from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass

from harness.errors import ConfigError


@dataclass(frozen=True)
class Faults:
    fail_rate: float = 0.0  # fraction of chat requests answered HTTP 500
    truncate_rate: float = 0.0  # fraction of streams cut after half their tokens
    metrics_hang_after_s: float | None = None  # /metrics never answers from then on
    die_after_s: float | None = None  # the process exits (code 3) at this wall time
    after_s: float = 0.0  # request faults start this many wall seconds after start
    die_after_requests: int | None = None  # exits (code 3) as stream N+1 arrives
    metrics_hang_after_requests: int | None = None  # /metrics hangs once N streams started
    after_requests: int = 0  # request faults start after this many streams

    def __post_init__(self) -> None:
        for key in ("fail_rate", "truncate_rate"):
            value = getattr(self, key)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"--{key.replace('_', '-')} {value!r}: must lie in [0, 1]")
        for key in ("metrics_hang_after_s", "die_after_s", "after_s"):
            value = getattr(self, key)
            if value is not None and value < 0:
                raise ConfigError(f"--{key.replace('_', '-')} {value!r}: must be >= 0")
        for key in ("die_after_requests", "metrics_hang_after_requests", "after_requests"):
            value = getattr(self, key)
            if value is not None and (isinstance(value, bool) or value < 0):
                raise ConfigError(f"--{key.replace('_', '-')} {value!r}: must be an integer >= 0")

    @property
    def any(self) -> bool:
        return bool(
            self.fail_rate
            or self.truncate_rate
            or self.metrics_hang_after_s is not None
            or self.die_after_s is not None
            or self.die_after_requests is not None
            or self.metrics_hang_after_requests is not None
        )


def _hit(n: int, rate: float) -> bool:
    return math.floor((n + 1) * rate + 1e-9) > math.floor(n * rate + 1e-9)


class FaultState:
    def __init__(self, faults: Faults) -> None:
        self.faults = faults
        self.t0 = time.monotonic()
        self._n_fail = 0
        self._n_trunc = 0
        self.streams = 0  # streaming chat requests seen
        self._lock = threading.Lock()
        if faults.die_after_s is not None:
            timer = threading.Timer(faults.die_after_s, lambda: os._exit(3))
            timer.daemon = True
            timer.start()

    def stream_started(self) -> None:
        """Count a streaming chat request; the server dies here if told to after N streams."""
        with self._lock:
            self.streams += 1
            seen = self.streams
        limit = self.faults.die_after_requests
        if limit is not None and seen > limit:
            os._exit(3)

    def _armed(self) -> bool:
        return time.monotonic() - self.t0 >= self.faults.after_s and (
            not self.faults.after_requests or self.streams > self.faults.after_requests
        )

    def fail_request(self) -> bool:
        if not self.faults.fail_rate or not self._armed():
            return False
        with self._lock:
            n, self._n_fail = self._n_fail, self._n_fail + 1
        return _hit(n, self.faults.fail_rate)

    def truncate_stream(self) -> bool:
        if not self.faults.truncate_rate or not self._armed():
            return False
        with self._lock:
            n, self._n_trunc = self._n_trunc, self._n_trunc + 1
        return _hit(n, self.faults.truncate_rate)

    def metrics_hang(self) -> bool:
        after = self.faults.metrics_hang_after_s
        if after is not None and time.monotonic() - self.t0 >= after:
            return True
        streams = self.faults.metrics_hang_after_requests
        return streams is not None and self.streams >= streams
