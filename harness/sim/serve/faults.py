"""Failures the simulated server can be told to produce, to test a sweep's failure handling.

Request-level faults are deterministic (the n-th chat request fails when floor((n+1) f) >
floor(n f)), so a run with a fraction f fails exactly round(N f) of N requests, the same ones
every time. They hit streaming requests only (a benchmark client streams; readiness checks and
the harness's warm-ups do not), and none during the first `after_s` wall seconds.
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

    def __post_init__(self) -> None:
        for key in ("fail_rate", "truncate_rate"):
            value = getattr(self, key)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"--{key.replace('_', '-')} {value!r}: must lie in [0, 1]")
        for key in ("metrics_hang_after_s", "die_after_s", "after_s"):
            value = getattr(self, key)
            if value is not None and value < 0:
                raise ConfigError(f"--{key.replace('_', '-')} {value!r}: must be >= 0")

    @property
    def any(self) -> bool:
        return bool(
            self.fail_rate
            or self.truncate_rate
            or self.metrics_hang_after_s is not None
            or self.die_after_s is not None
        )


def _hit(n: int, rate: float) -> bool:
    return math.floor((n + 1) * rate + 1e-9) > math.floor(n * rate + 1e-9)


class FaultState:
    def __init__(self, faults: Faults) -> None:
        self.faults = faults
        self.t0 = time.monotonic()
        self._n_fail = 0
        self._n_trunc = 0
        self._lock = threading.Lock()
        if faults.die_after_s is not None:
            timer = threading.Timer(faults.die_after_s, lambda: os._exit(3))
            timer.daemon = True
            timer.start()

    def _armed(self) -> bool:
        return time.monotonic() - self.t0 >= self.faults.after_s

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
        return after is not None and time.monotonic() - self.t0 >= after
