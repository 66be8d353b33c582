"""When the offloading connector's copies cost time, as vLLM 0.32.0 runs them (issue 24), by hand.

Neither direction blocks the engine step. A CPU hit is loaded asynchronously while the request
waits in WAITING_FOR_REMOTE_KVS holding the blocks it loads into (vLLM 0.32.0
`v1/core/sched/scheduler.py` load_kv_async), on a copy stream of its own that runs the loads in
submission order (vLLM 0.32.0 `v1/kv_offload/cpu/gpu_worker.py` transfer_async); stores are
deferred to the next step and copied the same way (vLLM 0.32.0
`distributed/kv_transfer/kv_connector/v1/offloading/worker.py` prepare_store_kv). The worker
blocks only on `jobs_to_flush` (a preempted request's stores, or a finished one's whose blocks
are reallocated in the step), which costs the blog's offloading arms nothing measurable:
reserve-full-input admission leaves one preemption in their sweeps, and a finished request's
last store is a block or two. So the simulator charges a load's copy to the request that waits
for it, never to the step, and a store's copy to nobody (docs/simulator.md §6a).

What the worker does spend is CPU time to submit the copies: one descriptor per block and layer
page, at `copy_submit_us` each, before it launches the step that carries the loads (or follows
the stores). It prepares a step while the GPU runs the previous one, so only the part of the
submission longer than that step is lost (`Engine.step_duration`; docs/simulator.md §6a, "Copy
submission").
"""

from __future__ import annotations

import pytest

from harness.capacity.model import find_model_for
from harness.sim.cost import StepStats, step_stats
from harness.sim.engine import Engine
from harness.sim.mtp import Mtp
from harness.sim.pool import connector_pages_per_block
from harness.sim.request import Request
from harness.sim.residency import Channel, OffloadResidency
from harness.sim.scheduler import Scheduler


def _sched(pol: OffloadResidency) -> Scheduler:
    return Scheduler(pol, max_num_seqs=8, max_num_batched_tokens=1000, mtp=Mtp(0, 1.0))


def _offload(h2d: Channel, store_every_step: bool = False, copy_pages: int = 0) -> OffloadResidency:
    # 16-token blocks of 100 B per rank; a GPU pool of 40 blocks, a CPU pool of 50
    return OffloadResidency(
        40,
        16,
        cpu_blocks=50,
        block_bytes=100,
        h2d=h2d,
        store_every_step=store_every_step,
        copy_pages=copy_pages,
    )


def test_a_load_overlaps_the_other_requests_steps():
    h2d = Channel(1000.0)  # B/s
    pol = _offload(h2d)
    s = _sched(pol)
    a = Request(0, 0, 1, 40, 20, 0.0)
    s.add(a)
    s.update(s.schedule(0.0), 0.1)  # a prefills its 40 tokens; decodes from here on
    pol.cpu.store(5, 6)  # conv 5 has 6 blocks (96 tokens) in the CPU pool only
    b = Request(1, 5, 2, 100, 4, 0.1)
    s.add(b)
    # 6 blocks x 100 B at 1,000 B/s: b waits for its load until 0.1 + 0.6 = 0.7 s, holding the
    # 6 blocks it loads into; a decodes one token per 0.1 s step meanwhile.
    t, a_steps = 0.1, 0
    while t < 0.65:
        batch = s.schedule(t)
        assert [(x.req.rid, x.prefill) for x in batch] == [(0, False)]
        assert b.load_until is not None and abs(b.load_until - 0.7) < 1e-9
        assert b.blocks == 6 and b in s.waiting
        # the step's cost inputs carry no copy: no staged or host-read rows (the only PCIe terms)
        stats = step_stats(batch, topk=2048, verify_width=1)
        assert (stats.staged_rows, stats.offloaded_rows, stats.prefill_tokens) == (0, 0, 0)
        t += 0.1
        s.update(batch, t)
        a_steps += 1
    assert a_steps == 6 and a.out == 1 + 6  # no step waited for the copy
    batch = s.schedule(0.7)  # loaded: b computes only its 4 uncached prompt tokens
    assert [(x.req.rid, x.tokens, x.context) for x in batch] == [(0, 1, 46), (1, 4, 96)]


def test_loads_run_one_after_another_in_submission_order():
    h2d = Channel(1000.0)
    pol = _offload(h2d)
    s = _sched(pol)
    pol.cpu.store(1, 3)  # 300 B
    pol.cpu.store(2, 5)  # 500 B
    first, second = Request(0, 1, 2, 60, 4, 0.0), Request(1, 2, 2, 90, 4, 0.0)
    s.add(first)
    s.add(second)
    assert s.schedule(0.0) == []  # both admitted and loading; nothing to run yet
    # one copy stream per direction, each transfer after the previous one's end: 0.3 s, then
    # the second's 0.5 s from 0.3 s
    assert (first.load_until, second.load_until) == (0.3, 0.8)
    assert s.next_load_done() == 0.3 and h2d.bytes_total == 800
    assert [x.req.rid for x in s.schedule(0.3)] == [0]
    assert [x.req.rid for x in s.schedule(0.8)] == [0, 1]


def test_stores_every_step_cost_no_time_and_serve_the_next_turn():
    h2d = Channel(1000.0)
    pol = _offload(h2d, store_every_step=True)
    s = _sched(pol)
    r = Request(0, 9, 1, 50, 40, 0.0)  # 50 prompt tokens: 3 full blocks after its prefill
    s.add(r)
    t = 0.0
    while not r.done:
        batch = s.schedule(t)
        stats = step_stats(batch, topk=2048, verify_width=1)
        # a store adds nothing a step pays for: no staged or host-read rows, no H2D traffic
        assert (stats.staged_rows, stats.offloaded_rows) == (0, 0)
        t += 0.1
        s.update(batch, t)
        if not r.done:  # stored while it runs, not only when it is freed
            assert pol.cpu.lookup(9) == min(r.computed, r.total) // 16
    assert h2d.bytes_total == 0 and h2d.free_at == 0.0
    # 50 + 40 = 90 tokens, 89 computed at the end: 5 full blocks stored, 500 B written
    assert pol.cpu.lookup(9) == 5 and pol.stored_bytes == 500


def test_the_connector_submits_one_copy_per_block_and_layer_page():
    model = find_model_for("glm-5.3")
    # GLM-5.3: 78 latent layers and 21 indexer layers; MTP adds one of each. The offloading arm's
    # connector moves every page of a block; beside HiSparse it holds only the indexer's.
    assert connector_pages_per_block(model, "offload", 3) == 78 + 1 + 21 + 1 == 101
    assert connector_pages_per_block(model, "offload", 0) == 99
    assert connector_pages_per_block(model, "hisparse", 3) == 22
    assert connector_pages_per_block(model, "hisparse", 0) == 21


def test_loads_and_stores_count_their_copy_descriptors():
    pol = _offload(Channel(1000.0), store_every_step=True, copy_pages=7)
    s = _sched(pol)
    pol.cpu.store(5, 6)  # 6 blocks of conv 5 in the CPU pool only (stored before: not counted)
    assert pol.copies_submitted == 0
    b = Request(1, 5, 2, 100, 16, 0.0)
    s.add(b)
    assert s.schedule(0.0) == []  # admitted, loading its 6 blocks
    assert pol.copies_submitted == 6 * 7
    t = 0.6  # loaded (600 B at 1,000 B/s); then 4 prompt tokens and 16 output tokens, one a step
    while not b.done:
        s.update(s.schedule(t), t + 0.1)
        t += 0.1
        # the seventh block (tokens 97-112) is stored by the step that completes it: 7 more
        assert pol.copies_submitted == (6 + (min(b.computed, b.total) >= 112)) * 7
    assert pol.cpu.lookup(5) == 7 and pol.copies_submitted == 7 * 7


class _FixedCost:
    """A step of fixed GPU time, and a submission price of 1 ms per descriptor."""

    copy_submit_us = 1000.0
    miss_rate = 0.0

    def __init__(self, gpu_s: float) -> None:
        self.gpu_s = gpu_s

    def step_time(self, s: StepStats) -> float:
        return self.gpu_s

    def pcie_bytes_per_s(self) -> float:
        return 1000.0


def test_only_the_submission_longer_than_the_previous_step_stalls_the_gpu():
    pol = _offload(Channel(1000.0), copy_pages=10)
    cost = _FixedCost(0.025)
    eng = Engine(_sched(pol), cost, topk=2048, labels={}, row_bytes=1)
    stats = StepStats()
    # a first step after an idle GPU: nothing ran beside its preparation, so 30 descriptors
    # (30 ms) stall it entirely
    pol.copies_submitted = 30
    assert eng.step_duration(stats) == pytest.approx(0.025 + 0.030)
    # 40 ms of submissions while the 25 ms step before ran: 15 ms exposed
    pol.copies_submitted += 40
    assert eng.step_duration(stats) == pytest.approx(0.025 + 0.015)
    # 20 ms: hidden behind the previous step
    pol.copies_submitted += 20
    assert eng.step_duration(stats) == pytest.approx(0.025)
    # submissions made while nothing ran cost the GPU nothing, and the next step overlaps none
    pol.copies_submitted += 500
    eng.went_idle()
    pol.copies_submitted += 10
    assert eng.step_duration(stats) == pytest.approx(0.025 + 0.010)
    assert eng.submit_stall_s == pytest.approx(0.030 + 0.015 + 0.010)


def test_a_cost_model_without_the_price_charges_nothing():
    pol = _offload(Channel(1000.0), copy_pages=10)
    cost = _FixedCost(0.025)
    cost.copy_submit_us = 0.0
    eng = Engine(_sched(pol), cost, topk=2048, labels={}, row_bytes=1)
    pol.copies_submitted = 10_000
    assert eng.step_duration(StepStats()) == 0.025 and eng.submit_stall_s == 0.0
