"""Speculative decoding (MTP): verify width and a deterministic acceptance length."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Mtp:
    spec_tokens: int  # num_speculative_tokens (0: no speculative decoding)
    acceptance_length: float  # mean tokens emitted per decode step, in [1, spec + 1]

    def __post_init__(self) -> None:
        if self.spec_tokens < 0:
            raise ValueError(f"num_speculative_tokens {self.spec_tokens}: must be >= 0")
        top = self.spec_tokens + 1
        if not 1.0 <= self.acceptance_length <= top:
            raise ValueError(
                f"acceptance length {self.acceptance_length}: must lie in [1, {top}] "
                f"with {self.spec_tokens} speculative tokens"
            )

    @property
    def verify_width(self) -> int:
        """Query tokens a decoding request puts in a step: the sampled token plus the drafts."""
        return self.spec_tokens + 1

    def emitted(self, step_index: int) -> int:
        """Tokens emitted by a request's `step_index`-th decode step (0-based).

        floor((k + 1) a) - floor(k a): every step emits 1..spec+1 tokens and k steps emit
        floor(k a) in total, so the mean is exactly `a` with no random numbers.
        """
        if self.spec_tokens == 0:
            return 1
        a = self.acceptance_length
        return math.floor((step_index + 1) * a + 1e-9) - math.floor(step_index * a + 1e-9)
