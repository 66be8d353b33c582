"""vLLM v1 `Scheduler.schedule()` as the simulator models it (vLLM 0.32.0 semantics).

One call forms one step's batch:
1. running requests first, in order: a decoding request asks for its verify width
   (1 + speculative tokens), a prefilling one for the rest of its input, both capped by the
   token budget (chunked prefill), and every one reserves the drafter's lookahead slots. When
   the pool cannot grow a running request, the newest running request is preempted
   (recompute: blocks freed but left in the prefix cache, request back at the head of the
   waiting queue), until the request fits or is itself preempted;
2. only if nothing was preempted: waiting requests in FCFS order while the budget and
   `max_num_seqs` allow. A request is admitted only if its whole input fits
   (`scheduler_reserve_full_isl`) and its first chunk with the lookahead slots does; a prefix
   found in a host pool is loaded asynchronously first (the request waits, holding the blocks
   it loads into, and is skipped until the load is done).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from harness.sim.mtp import Mtp
from harness.sim.request import Request
from harness.sim.residency import GpuResidency


@dataclass(frozen=True)
class Scheduled:
    req: Request
    tokens: int
    prefill: bool
    context: int  # tokens already computed before this step


@dataclass
class Counters:
    preemptions: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    external_hits: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished: int = 0
    inference_s: float = 0.0  # sum over finished requests of finish - first scheduled


class Scheduler:
    def __init__(
        self,
        residency: GpuResidency,
        *,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        mtp: Mtp,
        reserve_full_isl: bool = True,
    ) -> None:
        self.residency = residency
        self.running: list[Request] = residency.running
        self.waiting: deque[Request] = deque()
        self.max_num_seqs = max_num_seqs
        self.budget = max_num_batched_tokens
        self.mtp = mtp
        self.reserve_full_isl = reserve_full_isl
        self.counters = Counters()
        # vLLM schedules no waiting request in a step that preempted one; the next step does.
        self.preempted_in_last_schedule = False

    def add(self, req: Request) -> None:
        self.waiting.append(req)

    # ------------------------------------------------------------------ schedule
    def schedule(self, now: float) -> list[Scheduled]:
        budget = self.budget
        batch: list[Scheduled] = []
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            want = self.mtp.verify_width if req.decoding else req.total - req.computed
            n = min(want, budget)
            # the drafter's slots are reserved for every scheduled request, a prefill chunk's
            # too (vLLM 0.32.0 `v1/core/sched/scheduler.py` schedule: allocate_slots(...,
            # num_lookahead_tokens=self.num_lookahead_tokens))
            lookahead = self.mtp.spec_tokens
            gone = False
            while not self.residency.grow(req, req.computed + n + lookahead):
                victim = self.running.pop()
                self._preempt(victim)
                preempted = True
                if victim is req:
                    gone = True
                    break
            if gone:
                break  # the request preempted itself: it was the last one
            batch.append(Scheduled(req, n, not req.decoding, req.computed))
            budget -= n
            i += 1
        self.preempted_in_last_schedule = preempted
        if not preempted:
            budget = self._schedule_waiting(now, budget, batch)
        return batch

    def _preempt(self, req: Request) -> None:
        self.residency.release(req)
        req.computed_before_preemption = max(req.computed_before_preemption, req.computed)
        req.computed = 0
        req.preemptions += 1
        req.load_until = None
        self.counters.preemptions += 1
        self.waiting.appendleft(req)

    def _schedule_waiting(self, now: float, budget: int, batch: list[Scheduled]) -> int:
        # Requests holding KV blocks (admitted for an asynchronous load) are drained before the
        # others, each group in arrival order: vLLM 0.32.0 keeps them in `kv_holding_waiting`
        # (`v1/core/sched/scheduler.py` schedule). In one queue, a head that cannot be admitted
        # would block loaded requests whose blocks it needs, and nothing would run again.
        if any(r.blocks for r in self.waiting):
            order = [r for r in self.waiting if r.blocks] + [
                r for r in self.waiting if not r.blocks
            ]
            self.waiting.clear()
            self.waiting.extend(order)
        skipped: list[Request] = []
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            if req.load_until is not None and req.load_until > now:
                skipped.append(self.waiting.popleft())
                continue
            holding = req.blocks > 0  # its loaded prefix's blocks, allocated at admission
            if req.load_until is None and req.blocks == 0:
                state = self._admit(req, now, skipped, batch, budget)
                if state == "blocked":
                    break
                if state == "loading":
                    skipped.append(self.waiting.popleft())
                    continue
            req.load_until = None
            n = min(req.total - req.computed, budget)
            # an admission reserves the drafter's lookahead slots too (scheduler.py: the
            # waiting loop's allocate_slots(..., num_lookahead_tokens=...)); the whole-input
            # check before it does not (`_admit`)
            if not self.residency.grow(req, req.computed + n + self.mtp.spec_tokens):
                if not holding:
                    self.residency.release(req)
                    req.computed = 0
                break
            self.waiting.popleft()
            self.running.append(req)
            if req.scheduled_at is None:
                req.scheduled_at = now
            batch.append(Scheduled(req, n, True, req.computed))
            budget -= n
        self.waiting.extendleft(reversed(skipped))
        return budget

    def _admit(
        self,
        req: Request,
        now: float,
        skipped: list[Request],
        batch: list[Scheduled],
        budget: int,
    ) -> str:
        """Prefix lookup and reserve-full-input check: 'ready', 'loading' or 'blocked'."""
        residency = self.residency
        hit = residency.lookup(req)
        if (
            self.reserve_full_isl
            and residency.admission_units(req, hit) > residency.pool.available()
        ):
            return "blocked"
        # vLLM then allocates the first chunk with the drafter's lookahead slots, which the
        # whole-input check leaves out; if they do not fit it stops there and nothing changes
        # (`allocate_slots` returns None before touching the hit). Checked before the hit is
        # taken: a failed admission must not give the hit's blocks back as free ones.
        # An asynchronous load allocates only its loaded blocks now (no new work until the
        # load is done: `num_new_tokens = 0`), against the reservation below.
        hit_tokens = (hit.gpu_blocks + hit.external_blocks) * residency.block_tokens
        first_end = hit_tokens + min(req.total - hit_tokens, budget) + self.mtp.spec_tokens
        if not hit.load_bytes and not residency.first_chunk_fits(req, hit, first_end):
            return "blocked"
        # An asynchronous load holds its blocks with no forward progress, so vLLM 0.32.0 admits
        # one only if they fit beside what the prefills in flight (loading, or admitted and
        # still prefilling) need to finish, plus a speculative step's blocks
        # (`v1/core/sched/scheduler.py` _inflight_prefill_reserved_blocks,
        # _spec_decode_step_blocks). Without it, loads could take the blocks a running request
        # needed, and it preempted itself with nothing else running. vLLM applies it whether or
        # not the whole input must fit (`allocate_slots`' reserved_blocks is independent of
        # full_sequence_must_fit in `v1/core/kv_cache_manager.py`), so it is not gated on it.
        if (
            hit.load_bytes
            and residency.hit_units(hit) + self._reserved_units(req, skipped, batch)
            > residency.pool.available()
        ):
            return "blocked"
        residency.start(req, hit)
        bt = residency.block_tokens
        c = self.counters
        if req.preemptions == 0:
            # vLLM 0.32.0 files a resumed request's lookup apart (`PrefixCacheStats.record` in
            # v1/metrics/stats.py: preempted_queries/hits) and exports only the others as
            # vllm:prefix_cache_queries/hits (v1/metrics/loggers.py)
            c.prefix_queries += req.total
            c.prefix_hits += hit.gpu_blocks * bt
        if req.preemptions == 0 and req.cached_at_start == 0:
            req.cached_at_start = (hit.gpu_blocks + hit.external_blocks) * bt
        if hit.external_blocks == 0:
            return "ready"
        if not residency.attach_external(req, hit):
            residency.release(req)
            req.computed = 0
            return "blocked"
        c.external_hits += hit.external_blocks * bt
        req.computed = (hit.gpu_blocks + hit.external_blocks) * bt
        if hit.load_bytes:
            # Asynchronous, as in vLLM 0.32.0: the request waits in WAITING_FOR_REMOTE_KVS with
            # its blocks allocated, skipped until the worker reports the load done (vLLM 0.32.0
            # `v1/core/sched/scheduler.py` load_kv_async, _handle_blocked_waiting_request); the
            # copy runs on its own stream after the loads before it (vLLM 0.32.0
            # `v1/kv_offload/cpu/gpu_worker.py` transfer_async), once the worker has submitted
            # its descriptors, whose CPU time the engine charges to the step where the GPU
            # cannot hide it (`Engine.step_duration`). vLLM starts it once
            # the admitting step's forward ends and sees it done at a later step's poll, one or
            # two steps after this model does; a what-if with that lag moved no c8 speed and put
            # three MTP3 values out of their bands (docs/simulator.md §6a), so it is not modelled.
            req.load_until = residency.start_load(now, hit)
            return "loading" if req.load_until > now else "ready"
        return "ready"

    def _reserved_units(
        self, req: Request, skipped: Sequence[Request] = (), batch: Sequence[Scheduled] = ()
    ) -> int:
        """What the prefills in flight still need. In flight, as vLLM 0.32.0 keeps its
        `_inflight_prefills`: a load admitted earlier (this pass's too, which wait in `skipped`),
        and a running request still prefilling after this step's chunk in `batch`."""
        residency = self.residency
        spec = self.mtp.spec_tokens
        extra = 1 + 2 * spec if spec else 0  # the verify rows and the drafter's lookahead slots
        after_chunk = {id(x.req): x.context + x.tokens for x in batch if x.prefill}
        loading = [r for r in (*self.waiting, *skipped) if r.blocks and r is not req]
        prefilling = [r for r in self.running if after_chunk.get(id(r), r.computed) < r.total]
        inflight = loading + prefilling
        reserved = sum(residency.remaining_units(r, r.total + extra) for r in inflight)
        return reserved + (residency.blocks_for(extra) * residency.resident_units if extra else 0)

    # ------------------------------------------------------------------ update
    def update(self, batch: list[Scheduled], end: float) -> list[Request]:
        """Apply one executed step; returns the requests that finished in it."""
        finished: list[Request] = []
        c = self.counters
        spec = self.mtp.spec_tokens
        for item in batch:
            req = item.req
            if item.prefill:
                req.computed += item.tokens
                c.prompt_tokens += item.tokens
                if req.computed >= req.total:
                    req.out += 1
                    c.generation_tokens += 1
                    if req.first_token_at is None:
                        req.first_token_at = end
                    self.residency.on_computed(req)
            else:
                emitted = min(self.mtp.emitted(req.decode_steps, req.rid), req.max_out - req.out)
                req.decode_steps += 1
                if spec:
                    c.drafts += 1
                    c.draft_tokens += spec
                    c.accepted += emitted - 1
                req.out += emitted
                req.computed += emitted
                c.generation_tokens += emitted
            if req.done:
                req.finished_at = end
                c.inference_s += end - (req.scheduled_at if req.scheduled_at is not None else end)
                self.running.remove(req)
                self.residency.release(req)
                c.finished += 1
                finished.append(req)
            else:
                self.residency.on_step(req)
        return finished

    def next_load_done(self) -> float | None:
        times = [r.load_until for r in self.waiting if r.load_until is not None]
        return min(times) if times else None
