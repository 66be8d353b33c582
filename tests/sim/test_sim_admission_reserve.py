"""Admission of asynchronous loads beside prefills in flight, as vLLM 0.32.0 schedules them
(`v1/core/sched/scheduler.py` _inflight_prefill_reserved_blocks), and the pass after a step whose
only running request preempted itself, and a loaded request that cannot grow, by hand."""

from __future__ import annotations

import pytest

from harness.sim.mtp import Mtp
from harness.sim.request import Request
from harness.sim.residency import Channel, OffloadResidency
from harness.sim.scheduler import Scheduler


def _setup(pool_blocks: int) -> tuple[OffloadResidency, Scheduler]:
    # 16-token blocks; chunks of 160 tokens, so a 480-token prompt prefills over three steps
    pol = OffloadResidency(pool_blocks, 16, cpu_blocks=100, block_bytes=100, h2d=Channel(1e9))
    return pol, Scheduler(pol, max_num_seqs=8, max_num_batched_tokens=160, mtp=Mtp(0, 1.0))


def test_a_load_waits_for_the_blocks_a_prefill_in_flight_still_needs():
    pol, s = _setup(48)
    a = Request(0, 0, 1, 480, 4, 0.0)  # 30 blocks
    s.add(a)
    s.update(s.schedule(0.0), 0.1)  # first chunk: 10 blocks, 20 to go
    pol.cpu.store(5, 19)
    b = Request(1, 5, 2, 320, 4, 0.1)  # 20 blocks, 19 of them in the CPU pool
    s.add(b)
    batch = s.schedule(0.1)  # a's second chunk takes it to 20 blocks: 28 free
    # b's whole input (20 blocks) fits in the 28, but loading its 19 would leave 9 of the 10
    # that a still needs to finish its prefill: vLLM keeps them for a, and b waits
    assert s._reserved_units(b) == 10
    assert [x.req.rid for x in batch] == [0]
    assert b.blocks == 0 and b.load_until is None and b in s.waiting
    s.update(batch, 0.2)
    t = 0.2
    while a in s.running:  # a's last chunk (30 blocks), then its 4 output tokens
        batch = s.schedule(t)
        assert b.blocks == 0  # 18 free or fewer: b's whole input does not fit meanwhile
        t += 0.1
        s.update(batch, t)
    # a finished and its blocks went back: nothing in flight, b is admitted and loads
    s.schedule(t)
    assert b.blocks == 19 and b.load_until is not None and s._reserved_units(b) == 0


@pytest.mark.parametrize("reserve_full_isl", [True, False])
def test_a_load_in_flight_reserves_what_it_still_needs_against_the_next_load(
    reserve_full_isl: bool,
):
    # vLLM passes reserved_blocks to allocate_slots whatever scheduler_reserve_full_isl says
    pol = OffloadResidency(48, 16, cpu_blocks=100, block_bytes=100, h2d=Channel(1e3))
    s = Scheduler(
        pol,
        max_num_seqs=8,
        max_num_batched_tokens=160,
        mtp=Mtp(0, 1.0),
        reserve_full_isl=reserve_full_isl,
    )
    pol.cpu.store(5, 19)
    pol.cpu.store(6, 19)
    a = Request(0, 5, 1, 480, 4, 0.0)  # 30 blocks, 19 of them loaded: 11 still to come
    b = Request(1, 6, 1, 320, 4, 0.0)  # 20 blocks, 19 of them loaded
    s.add(a)
    s.add(b)
    assert s.schedule(0.0) == []  # a loads (slowly); b's 19 + a's 11 exceed the 29 free
    assert a.blocks == 19 and a.load_until is not None
    assert s._reserved_units(b) == 11
    assert b.blocks == 0 and b.load_until is None


def test_with_no_prefill_in_flight_the_load_is_admitted_at_once():
    pol, s = _setup(48)
    a = Request(0, 0, 1, 150, 40, 0.0)  # 10 blocks, prefilled in one chunk, then decoding
    s.add(a)
    s.update(s.schedule(0.0), 0.1)
    pol.cpu.store(5, 19)
    b = Request(1, 5, 2, 320, 4, 0.1)
    s.add(b)
    s.schedule(0.1)
    assert b.blocks == 19 and b.load_until is not None  # loading: decodes reserve nothing


def test_a_pass_after_a_self_preemption_admits_instead_of_stalling():
    """A load can take the blocks the one running request will need: vLLM reserves blocks for
    prefills in flight, not for decodes. When that request then needs a block, it is the
    newest running request and preempts itself, and the step schedules nothing. vLLM schedules
    the waiting requests on the next pass; so must the simulator (the engine once stopped here
    as stalled, in a calibration step's offloading c24 point)."""
    # 9 blocks of 16 tokens; without the whole-input reservation a load is admitted on its
    # loaded blocks alone
    pol = OffloadResidency(9, 16, cpu_blocks=100, block_bytes=100, h2d=Channel(1e9))
    s = Scheduler(
        pol, max_num_seqs=8, max_num_batched_tokens=160, mtp=Mtp(0, 1.0), reserve_full_isl=False
    )
    a = Request(0, 0, 1, 100, 40, 0.0)  # 7 blocks, decodes into an 8th at token 113
    s.add(a)
    s.update(s.schedule(0.0), 0.01)
    pol.cpu.store(5, 2)
    b = Request(1, 5, 1, 48, 4, 0.01)  # 3 blocks, 2 of them in the CPU pool
    s.add(b)
    s.update(s.schedule(0.01), 0.02)
    assert b.blocks == 2 and b.load_until is not None  # loading: the last 2 free blocks
    t, empty = 0.02, None
    for _ in range(20):
        batch = s.schedule(t)
        if not batch:
            empty = t
            break
        t += 0.01
        s.update(batch, t)
    # a needed its 8th block with none free and preempted itself; b, loaded, could not grow
    assert empty is not None and s.preempted_in_last_schedule
    assert a.preemptions == 1 and not s.running and [r.rid for r in s.waiting] == [0, 1]
    batch = s.schedule(t)  # the next pass: b (holding blocks: first) takes a's and runs
    assert [x.req.rid for x in batch] == [1] and b.blocks == 3


def test_a_loaded_request_that_cannot_grow_keeps_its_blocks_and_waits():
    # vLLM 0.32.0 keeps a request in `kv_holding_waiting` with the blocks it loaded into when
    # allocate_slots cannot give it the rest; running requests that then lack a block are
    # preempted instead (only running requests are).
    pol = OffloadResidency(40, 16, cpu_blocks=100, block_bytes=100, h2d=Channel(1500 / 7))
    s = Scheduler(pol, max_num_seqs=8, max_num_batched_tokens=1000, mtp=Mtp(0, 1.0))
    a = Request(0, 0, 1, 300, 200, 0.0)  # 19 blocks, then one more per 16 output tokens
    s.add(a)
    s.update(s.schedule(0.0), 0.1)
    pol.cpu.store(5, 15)
    b = Request(1, 5, 2, 300, 4, 0.1)  # 19 blocks, 15 of them loaded over 7 s
    s.add(b)
    t = 0.1
    s.update(s.schedule(t), t + 0.1)  # admitted: its whole input fits (19 of 21 free)
    assert b.blocks == 15 and b.load_until == pytest.approx(7.1)
    t += 0.1
    while t < b.load_until:
        s.update(s.schedule(t), t + 0.1)
        t += 0.1
    # loaded; a has 72 output tokens (24 blocks), one block is free and b needs 4 more
    assert pol.pool.available() == 1 and a.out == 72
    batch = s.schedule(t)
    assert b.load_until is None  # its load was seen done in this pass
    assert [x.req.rid for x in batch] == [0]
    assert b.blocks == 15 and b in s.waiting and b.computed == 15 * 16  # holding, not released
    while b not in s.running:  # a runs out of blocks, preempts itself; then b takes them
        t += 0.1
        s.update(s.schedule(t), t + 0.1)
    assert a.preemptions == 1 and b.blocks == 19
