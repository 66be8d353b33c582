"""The simulated engine live: one thread advances it in virtual time, K x faster than the wall.

Loop: take the requests that arrived -> `schedule()` -> step time from the cost model -> sleep
until the wall clock reaches the step's end (virtual end / K) -> apply the step -> hand every
request its new tokens. Idle, the virtual clock follows the wall clock (v = K x wall since
start), so a request arriving after a pause starts at its arrival instant. When the thread cannot
keep up (a step's end is already past on the wall clock) it does not sleep; the lag is counted
(`lag_s`), because the client then sees times stretched by it. A request is stamped with the
virtual instant it was received; one that arrives while the engine is behind waits in the
engine's arrival queue until the engine's clock reaches its stamp. The clock never jumps ahead
to the wall while requests are running, which would hand them an idle gap no engine has.

Prefix identity: each request's prompt is matched against the full-block hash chains of earlier
requests (prompt + generated tokens, as vLLM caches them) in `PrefixIndex`, which names the
conversation it continues (the engine's prefix-cache key); the matched block count, or the
blocks a preempted request computed itself, caps the engine's hit.
"""

from __future__ import annotations

import heapq
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.sim.engine import Engine
from harness.sim.request import Request
from harness.sim.serve.tokens import Prompt

# A request's events: ("tokens", n) after a step that emitted n tokens, ("done", None) at the end.
Emit = Callable[[list[tuple["Handle", str, Any]]], None]


@dataclass
class Handle:
    """One request as the HTTP side sees it; `sink` receives its events on the event loop."""

    req: Request
    prompt: Prompt
    sink: Any = None  # set by the server: an asyncio.Queue
    sent: int = 0  # tokens already handed out
    received_at: float = 0.0  # virtual time the server received the request
    cached_tokens: int = 0
    key: str | None = None  # the conversation's first-turn key (request log only)
    turn: int | None = None  # 1 + assistant messages in the request's history
    tpot_s: float | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    inference_s: float | None = None  # finish - first scheduled, as vLLM observes it


@dataclass
class _Conv:
    conv: int
    first_prompt_blocks: int | None = None  # full blocks of its shortest stored prompt


class PrefixIndex:
    """Every stored chain hash -> the conversation whose history holds it.

    A chain hash names its whole prefix, so the blocks a prompt shares with what is stored are
    the leading run of its hashes found here (found hashes are always a leading run: a stored
    chain stores each of its prefixes). A prompt continues a conversation when it covers that
    conversation's first prompt (every later turn re-sends it; a template that re-renders earlier
    replies differently diverges only after it) or is itself wholly stored (a conversation
    replayed from its start). A prompt that shares less, such as a system prompt common to many
    conversations, starts a conversation of its own: the engine's caches are per conversation,
    so it gets no hit from the other one.
    Keying conversations by their first block instead once merged every conversation with a
    common system prompt into one, whose later turns then matched only that system prompt."""

    def __init__(self) -> None:
        self._owner: dict[bytes, _Conv] = {}
        self._convs: dict[int, _Conv] = {}
        self._anonymous = 0
        self._next_id = 0

    def _stored_run(self, hashes: list[bytes]) -> int:
        lo, hi = 0, len(hashes)  # hashes[:lo] stored, hashes[hi:] not
        while lo < hi:
            mid = (lo + hi) // 2
            if hashes[mid] in self._owner:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _new(self) -> int:
        entry = _Conv(self._next_id)
        self._next_id += 1
        self._convs[entry.conv] = entry
        return entry.conv

    def match(self, hashes: list[bytes]) -> tuple[int, int]:
        """(conversation id, leading blocks equal to its stored history)."""
        if not hashes:
            self._anonymous += 1
            return -self._anonymous, 0  # no full block: nothing to share
        n = self._stored_run(hashes)
        if n:
            entry = self._owner[hashes[n - 1]]
            first = entry.first_prompt_blocks or 0
            # one block of slack: the generation prompt at its end may render differently
            if n == len(hashes) or n >= first - 1:
                return entry.conv, n
        return self._new(), 0

    def store(self, hashes: list[bytes], conv: int, prompt_blocks: int) -> None:
        """A finished request's history (prompt + reply, full blocks) under its conversation."""
        # a request whose prompt had no full block is known from here on, under its own id
        entry = self._convs.setdefault(conv, _Conv(conv))
        for h in hashes:
            self._owner[h] = entry
        first = entry.first_prompt_blocks
        entry.first_prompt_blocks = prompt_blocks if first is None else min(first, prompt_blocks)


class LiveEngine:
    """Drives `engine` from a background thread; `submit` is thread-safe."""

    def __init__(
        self,
        engine: Engine,
        *,
        time_scale: float,
        emit: Emit,
        on_finish: Callable[[Handle], None] | None = None,
    ) -> None:
        if not time_scale > 0:
            raise ValueError(f"time scale {time_scale!r}: must be > 0")
        self.engine = engine
        self.sched = engine.scheduler
        self.k = float(time_scale)
        self.emit = emit
        self.on_finish = on_finish
        self.lock = threading.Lock()  # held while the engine state changes (and by /metrics)
        self._wake = threading.Condition(threading.Lock())
        self._inbox: list[Handle] = []
        self._handles: dict[int, Handle] = {}
        self._stop = False
        self._thread: threading.Thread | None = None
        self.wall0 = time.monotonic()
        self.lag_s = 0.0  # virtual seconds the engine fell behind the wall clock, in total
        self.behind_at_arrival_s = 0.0  # summed over requests: how far behind each one found it
        self.prefix = PrefixIndex()
        self._rid = 0

    # ------------------------------------------------------------------ clock
    def virtual_now(self) -> float:
        return (time.monotonic() - self.wall0) * self.k

    def wall_at(self, virtual: float) -> float:
        return self.wall0 + virtual / self.k

    # ------------------------------------------------------------------ API
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sim-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._wake:
            self._stop = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def submit(
        self,
        prompt: Prompt,
        max_tokens: int,
        sink: Any = None,
        *,
        key: str | None = None,
        turn: int | None = None,
    ) -> Handle:
        with self._wake:
            conv, matched = self.prefix.match(prompt.block_hashes)
            rid = self._rid
            self._rid += 1
            req = Request(rid, conv, 1, prompt.tokens, max_tokens, 0.0)
            # A prompt that diverges from the stored history hits only its matching blocks.
            # Capping at the match alone (not also at the request's own computed blocks, see
            # Residency.max_hit_blocks) made every preempted first turn at c32 of the blog's
            # sweep recompute its whole prompt: 1.0 M more prompt tokens than offline.
            req.hit_cap_blocks = matched
            handle = Handle(req, prompt, sink, key=key, turn=turn, received_at=self.virtual_now())
            self._inbox.append(handle)
            self._wake.notify()
        return handle

    def abort(self, handle: Handle) -> None:
        """The client went away: drop the request wherever it is (vLLM aborts it)."""
        with self.lock:
            req = handle.req
            if req.rid not in self._handles:
                return
            del self._handles[req.rid]
            if req in self.sched.running:
                self.sched.running.remove(req)
                self.engine.residency.release(req)
            elif req in self.sched.waiting:
                self.sched.waiting.remove(req)
                if req.blocks:
                    self.engine.residency.release(req)
            else:  # still with the frontend: it never reaches the engine
                for queue in (self.engine.pending, self.engine.arriving):
                    queue[:] = [entry for entry in queue if entry[2] is not req]
                    heapq.heapify(queue)

    # ------------------------------------------------------------------ the loop
    def _admit_arrivals(self) -> None:
        with self._wake:
            arrivals, self._inbox = self._inbox, []
        if not arrivals:
            return
        eng = self.engine
        for h in arrivals:
            # Behind the wall, the engine reaches the stamp by stepping; never by skipping.
            if self.sched.running:  # idle, a stale clock is not a lag
                self.behind_at_arrival_s += max(0.0, h.received_at - eng.now)
            h.req.arrival = h.received_at
            self._handles[h.req.rid] = h
            eng.receive(h.req)  # through the frontend's renderer threads, as offline

    def _idle_wait(self, until_virtual: float | None) -> None:
        with self._wake:
            if self._inbox or self._stop:
                return
            timeout = (
                0.5 if until_virtual is None else self.wall_at(until_virtual) - time.monotonic()
            )
            if timeout > 0:
                self._wake.wait(timeout)

    def _sleep_until(self, virtual: float) -> None:
        delay = self.wall_at(virtual) - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        elif delay < -0.001:
            self.lag_s += -delay * self.k

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException:  # noqa: BLE001 - an engine that died must take the server down
            # as vLLM's API server exits when its engine core dies: the sweep sees a dead server
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(70)

    def _loop(self) -> None:
        eng, sched = self.engine, self.sched
        while not self._stop:
            with self.lock:
                self._admit_arrivals()
                eng.admit_ready()
                batch = sched.schedule(eng.now)
            if not batch and sched.preempted_in_last_schedule:
                continue  # the last running request preempted itself: the next pass admits
            if not batch:
                wakes = [t for t in (sched.next_load_done(), eng.next_ready()) if t is not None]
                wake = min(wakes) if wakes else None
                self._idle_wait(wake)
                with self.lock:
                    if wake is not None and not self._inbox:
                        eng.now = max(eng.now, min(wake, self.virtual_now()))
                    eng.went_idle()
                continue
            stats = eng.step_stats(batch)
            end = eng.now + eng.step_duration(stats)
            self._sleep_until(end)
            with self.lock:
                self._apply(batch, stats, end)

    def _apply(self, batch: list[Any], stats: Any, end: float) -> None:
        eng = self.engine
        eng.count_host_reads(stats)
        eng.now = end
        eng.steps += 1
        finished = self.sched.update(batch, end)
        events: list[tuple[Handle, str, Any]] = []
        for item in batch:
            h = self._handles.get(item.req.rid)
            if h is None:
                continue
            new = item.req.out - h.sent
            if new > 0:
                if h.sent == 0:
                    h.cached_tokens = item.req.cached_at_start
                h.sent = item.req.out
                events.append((h, "tokens", new))
        for req in finished:
            h = self._handles.pop(req.rid, None)
            if h is None:
                continue
            first = req.first_token_at if req.first_token_at is not None else end
            h.ttft_s = first - req.arrival
            h.e2e_s = end - req.arrival
            h.inference_s = end - (req.scheduled_at if req.scheduled_at is not None else end)
            h.tpot_s = (end - first) / (req.out - 1) if req.out > 1 else None
            h.cached_tokens = req.cached_at_start
            if self.on_finish is not None:
                self.on_finish(h)
            events.append((h, "done", None))
        if events:
            self.emit(events)

    def remember_output(self, h: Handle, output_hashes: list[bytes]) -> None:
        """The cached history of a finished request: its prompt + generated full blocks."""
        with self._wake:
            self.prefix.store(output_hashes, h.req.conv, len(h.prompt.block_hashes))
