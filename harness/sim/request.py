"""One request (one conversation turn) as the engine tracks it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Request:
    rid: int
    conv: int  # dataset index: the prefix-cache identity of its history
    turn: int  # 1-based
    prompt: int  # prompt tokens
    max_out: int  # output tokens (ignore_eos: always produced in full)
    arrival: float  # virtual s when the client sent it
    computed: int = 0  # tokens whose KV is computed
    out: int = 0  # output tokens produced
    blocks: int = 0  # token blocks held on the GPU
    units: int = 0  # GPU pool units held (blocks x units per block + lease)
    lease: int = 0  # HiSparse hot buffer + retained tail units held
    offloaded: bool = False  # HiSparse: decodes with host-resident history
    load_until: float | None = None  # an asynchronous KV load in flight until then
    decode_steps: int = 0
    preemptions: int = 0
    cached_at_start: int = 0  # prompt tokens served from a cache at the first schedule
    # Prefix-cache hits are capped at these blocks (None: the conversation's whole stored
    # history may hit, as offline). The HTTP server sets it to the blocks its prompt matched.
    hit_cap_blocks: int | None = None
    computed_before_preemption: int = 0  # the most tokens computed before any preemption
    scheduled_at: float | None = None  # first scheduled (a preemption keeps it, as vLLM does)
    first_token_at: float | None = None
    finished_at: float | None = None

    @property
    def total(self) -> int:
        return self.prompt + self.out

    @property
    def decoding(self) -> bool:
        """Only the last sampled token is pending: the next step verifies/decodes."""
        return self.out > 0 and self.computed >= self.total - 1

    @property
    def done(self) -> bool:
        return self.out >= self.max_out
