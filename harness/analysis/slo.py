"""Latency objectives (SLOs): ``ttft=2s,tpot=50ms`` -> per-request limits in seconds.

The same text is accepted by ``--slo`` on the command line and by a workload's ``slo`` field.
Keys: ``ttft`` (time to first token), ``tpot`` (time per output token after the first),
``itl`` (every inter-token gap of the request), ``e2e`` (request latency, first byte sent to
last byte received). A value is a number with a unit ``s`` or ``ms``; a bare number is refused
(``2`` could mean either). A request meets the objectives when it succeeded and is at or below
every limit given.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from harness.errors import ConfigError

SLO_KEYS = ("ttft", "tpot", "itl", "e2e")
_VALUE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s)\s*$")


@dataclass(frozen=True)
class Objectives:
    """Limits in seconds; None: no objective on that quantity."""

    ttft: float | None = None
    tpot: float | None = None
    itl: float | None = None
    e2e: float | None = None

    @property
    def given(self) -> dict[str, float]:
        return {k: v for k in SLO_KEYS if (v := getattr(self, k)) is not None}

    def text(self) -> str:
        """The canonical spelling, e.g. ``ttft=2s,tpot=50ms`` (round-trips through parse_slo)."""
        parts = []
        for key, value in self.given.items():
            ms = value * 1000.0
            parts.append(f"{key}={ms:g}ms" if ms < 1000 else f"{key}={value:g}s")
        return ",".join(parts)


def parse_slo(text: str, *, source: str = "--slo") -> Objectives:
    """``ttft=2s,tpot=50ms`` -> Objectives, or a ConfigError naming the bad part."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{source}: empty objectives (expected e.g. ttft=2s,tpot=50ms)")
    limits: dict[str, float] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep:
            raise ConfigError(f"{source}: {part.strip()!r}: expected KEY=VALUE (e.g. ttft=2s)")
        if key not in SLO_KEYS:
            raise ConfigError(
                f"{source}: {key!r}: unknown objective (known: {', '.join(SLO_KEYS)})"
            )
        if key in limits:
            raise ConfigError(f"{source}: {key!r} given twice")
        match = _VALUE.match(value)
        if not match:
            raise ConfigError(
                f"{source}: {key}={value.strip()!r}: a positive number with a unit s or ms "
                "(e.g. 2s, 50ms)"
            )
        seconds = float(match.group(1)) / (1000.0 if match.group(2) == "ms" else 1.0)
        if not math.isfinite(seconds) or seconds <= 0:
            raise ConfigError(f"{source}: {key}={value.strip()!r}: must be greater than 0")
        limits[key] = seconds
    return Objectives(**limits)
