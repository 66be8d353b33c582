"""EvalScope's multi-turn replay, offline (docs/evalscope.md sections 3-4).

`parallel` workers each own one conversation at a time and claim the next in dataset order
after the offset rotation; each turn re-sends the whole history (previous prompt + reply + the
new user turn); replies are fixed `max_tokens` (ignore_eos); a failed turn abandons the rest
of its conversation. Token counts per turn come from the dataset.

Think time (harness/dataset/thinktime.py): the next turn of a conversation is sent `pause`
virtual seconds after the previous reply ended, exactly as the `repro_think` EvalScope plugin
does on a real server: the request's start (and so its TTFT and latency) is after the pause,
and the worker keeps its conversation during it. With no think time (or pauses of 0) every turn
is sent at the instant the previous one ended, as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.dataset.thinktime import PauseTable
from harness.sim.request import Request


@dataclass(frozen=True)
class Workload:
    """Per conversation, the new user tokens of each turn (turn 1 = the whole first prompt)."""

    turns: tuple[tuple[int, ...], ...]
    source: str = "blog-shaped"

    @property
    def num_conversations(self) -> int:
        return len(self.turns)

    @property
    def num_turns(self) -> int:
        return min(len(t) for t in self.turns) if self.turns else 0


def shaped_workload(
    number: int, num_turns: int, first: int, subsequent: int, source: str
) -> Workload:
    turn = (first,) + (subsequent,) * (num_turns - 1)
    return Workload(tuple(turn for _ in range(number)), source)


def prompt_tokens(user_turns: tuple[int, ...], turn: int, reply: int) -> int:
    """P_t = sum of the user turns so far + (t - 1) replies (docs/recipe.md §6.8)."""
    return sum(user_turns[:turn]) + (turn - 1) * reply


@dataclass
class Turn:
    """What the client saw of one request."""

    conv: int
    turn: int
    start: float
    end: float | None
    success: bool
    prompt: int
    out: int = 0
    ttft: float | None = None
    decode_steps: int = 0
    client_cached: int = 0  # EvalScope's client-side cache estimate: P_{t-1} + reply
    server_cached: int | None = None  # the engine's prefix hit (GPU + host) at admission
    think: float = 0.0  # the pause before this turn (virtual seconds)


@dataclass
class PointClient:
    workload: Workload
    conversations: list[int]
    parallel: int
    turns: int
    max_tokens: int
    max_model_len: int
    rid_base: int = 0
    pauses: PauseTable | None = None  # think time before turns > 1 (None: none)
    records: list[Turn] = field(default_factory=list)
    _next_conv: int = 0
    _active: int = 0
    _rid: int = 0
    _by_rid: dict[int, Turn] = field(default_factory=dict)

    def start(self, now: float) -> list[Request]:
        out: list[Request] = []
        for _ in range(min(self.parallel, len(self.conversations))):
            req = self._claim(now)
            if req is not None:
                out.append(req)
        return out

    @property
    def done(self) -> bool:
        return self._active == 0 and self._next_conv >= len(self.conversations)

    def _claim(self, now: float) -> Request | None:
        while self._next_conv < len(self.conversations):
            conv = self.conversations[self._next_conv]
            self._next_conv += 1
            req = self._turn(conv, 1, now)
            if req is not None:
                self._active += 1
                return req
        return None

    def _turn(self, conv: int, turn: int, now: float) -> Request | None:
        """The request for `turn`, or None when it fails at once (too long: abandoned)."""
        user = self.workload.turns[conv]
        prompt = prompt_tokens(user, turn, self.max_tokens)
        cached = prompt_tokens(user, turn - 1, self.max_tokens) + self.max_tokens if turn > 1 else 0
        rid = self.rid_base + self._rid
        self._rid += 1
        think = self.pauses.pause(conv, turn) if self.pauses is not None else 0.0
        now += think  # sent after the pause: the pause is in no request's times
        rec = Turn(conv, turn, now, None, False, prompt, client_cached=cached, think=think)
        self.records.append(rec)
        if prompt + self.max_tokens > self.max_model_len:
            rec.end = now  # vLLM answers 400: the conversation is abandoned
            return None
        self._by_rid[rid] = rec
        return Request(rid, conv, turn, prompt, self.max_tokens, now)

    def on_finish(self, req: Request, now: float) -> Request | None:
        """Record the finished turn; the worker's next request (same or next conversation)."""
        rec = self._by_rid.pop(req.rid)
        rec.end, rec.success, rec.out = now, True, req.out
        rec.ttft = (req.first_token_at or now) - rec.start
        rec.decode_steps = req.decode_steps
        rec.server_cached = req.cached_at_start
        if req.turn < self.turns:
            nxt = self._turn(req.conv, req.turn + 1, now)
            if nxt is not None:
                return nxt
        self._active -= 1
        return self._claim(now)
