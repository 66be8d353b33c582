"""Speculative decoding (MTP): verify width and how many tokens each verify step emits.

Two acceptance models (docs/simulator.md §5b):
- drawn (`spread` set, what a calibrated engine runs): a verify step stops at the first rejected
  draft and emits the accepted drafts plus the target's own token (vLLM 0.32.0
  `v1/sample/rejection_sampler.py`), so it emits 1..k+1 tokens. Each draft is accepted with the
  same probability alpha once the drafts before it were: P(emitted > j) = alpha^j. How well the
  drafter predicts depends on the text, so each request (one turn's reply) has its own mean
  acceptance, uniform within acceptance_length x (1 +- spread). Draws come from a counter-based
  hash of (request, step): no state, byte-identical reruns, and requests that start together
  drift apart as real ones do.
- even (`spread` None, `--calibration none` and the hand-checked tests): every request emits
  floor((k + 1) a) - floor(k a) at its k-th step; requests of the same shape move in lockstep.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

_MASK = (1 << 64) - 1
_REQUEST_DRAW = -1  # the step index of the draw that sets a request's own mean acceptance


def unit_draw(stream: int, step: int) -> float:
    """A number in [0, 1) that depends only on (stream, step): splitmix64's finaliser over a
    mix of the two (integer arithmetic: the same on every run and platform)."""
    z = (stream * 0x9E3779B97F4A7C15 + step * 0xD1B54A32D192ED03 + 0x632BE59BD9B4E019) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return ((z ^ (z >> 31)) >> 11) / float(1 << 53)


def per_draft_probability(spec_tokens: int, acceptance_length: float) -> float:
    """alpha with 1 + alpha + ... + alpha^k = acceptance_length (bisection: the sum rises with
    alpha from 1 at 0 to k + 1 at 1)."""
    low, high = 0.0, 1.0
    for _ in range(48):
        mid = (low + high) / 2
        total = 0.0
        for _ in range(spec_tokens + 1):  # Horner: 1 + mid (1 + mid (...))
            total = 1.0 + mid * total
        if total < acceptance_length:
            low = mid
        else:
            high = mid
    return (low + high) / 2


@lru_cache(maxsize=4096)  # a request's steps reuse it; bounded for a long-lived server
def _tail(spec_tokens: int, acceptance_length: float) -> tuple[float, ...]:
    """P(emitted > j) = alpha^j for j = 1..k."""
    alpha = per_draft_probability(spec_tokens, acceptance_length)
    return tuple(alpha**j for j in range(1, spec_tokens + 1))


@dataclass(frozen=True)
class Mtp:
    spec_tokens: int  # num_speculative_tokens (0: no speculative decoding)
    acceptance_length: float  # mean tokens emitted per decode step, in [1, spec + 1]
    spread: float | None = None  # None: even emission; else drawn, requests' relative spread

    def __post_init__(self) -> None:
        if self.spec_tokens < 0:
            raise ValueError(f"num_speculative_tokens {self.spec_tokens}: must be >= 0")
        top = self.spec_tokens + 1
        if not 1.0 <= self.acceptance_length <= top:
            raise ValueError(
                f"acceptance length {self.acceptance_length}: must lie in [1, {top}] "
                f"with {self.spec_tokens} speculative tokens"
            )
        if self.spread is not None and not 0.0 <= self.spread < 1.0:
            raise ValueError(f"acceptance spread {self.spread}: must lie in [0, 1)")

    @property
    def verify_width(self) -> int:
        """Query tokens a decoding request puts in a step: the sampled token plus the drafts."""
        return self.spec_tokens + 1

    def request_acceptance(self, stream: int) -> float:
        """Request `stream`'s own mean acceptance length (drawn model), within [1, k + 1]."""
        assert self.spread is not None
        u = unit_draw(stream, _REQUEST_DRAW)
        own = self.acceptance_length * (1.0 + self.spread * (2.0 * u - 1.0))
        return min(float(self.verify_width), max(1.0, own))

    def tails(self, stream: int) -> tuple[float, ...]:
        """Request `stream`'s P(emitted > j), j = 1..k (drawn model)."""
        return _tail(self.spec_tokens, self.request_acceptance(stream))

    def emitted(self, step_index: int, stream: int = 0) -> int:
        """Tokens emitted by the `step_index`-th decode step (0-based) of request `stream`.

        even: floor((k + 1) a) - floor(k a), so k steps emit floor(k a) in total.
        drawn: 1 + the number of j in 1..spec with u < alpha_r^j, u = unit_draw(stream, k).
        """
        if self.spec_tokens == 0:
            return 1
        if self.spread is not None:
            u = unit_draw(stream, step_index)
            return 1 + sum(1 for tail in self.tails(stream) if u < tail)
        a = self.acceptance_length
        return math.floor((step_index + 1) * a + 1e-9) - math.floor(step_index * a + 1e-9)
