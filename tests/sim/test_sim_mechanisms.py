"""Hand-checked small cases for every simulator mechanism (numbers worked out in comments)."""

from __future__ import annotations

from harness.sim.blocks import GpuPool, PrefixLru
from harness.sim.mtp import Mtp
from harness.sim.request import Request
from harness.sim.residency import Channel, GpuResidency, HiSparseResidency, OffloadResidency
from harness.sim.scheduler import Scheduler


def req(rid: int, conv: int, prompt: int, out: int = 4, turn: int = 1) -> Request:
    return Request(rid, conv, turn, prompt, out, 0.0)


def sched(residency, budget: int = 1000, seqs: int = 16, spec: int = 0, acc: float = 1.0):
    return Scheduler(
        residency, max_num_seqs=seqs, max_num_batched_tokens=budget, mtp=Mtp(spec, acc)
    )


def run_until_done(s: Scheduler, reqs: list[Request], limit: int = 1000) -> int:
    steps = 0
    t = 0.0
    while any(not r.done for r in reqs):
        batch = s.schedule(t)
        t += 1.0
        s.update(batch, t)
        steps += 1
        assert steps < limit
    return steps


# ------------------------------------------------------------------ block accounting


def test_gpu_pool_evicts_cached_tail_first_and_only_when_needed():
    pool = GpuPool(10)
    assert pool.allocate(6)
    pool.release(6, conv=1, cache_blocks=5)  # 5 cached blocks of conv 1, 1 unit freed
    assert (pool.free, pool.cached_units, pool.used) == (5, 5, 0)
    assert not pool.allocate(11)  # more than free + cached: nothing evicted
    assert pool.cached_blocks(1) == 5
    assert pool.allocate(7)  # 5 free + 2 evicted from conv 1's tail
    assert pool.cached_blocks(1) == 3 and pool.evicted_blocks == 2
    assert pool.take_cached(1, 2) == 2  # hit of 2 blocks; the third stays cached, unhittable
    assert (pool.free, pool.cached_units, pool.used) == (0, 1, 9)
    assert pool.cached_blocks(1) == 0
    pool.check()


def test_blocks_a_hit_leaves_behind_keep_their_place_in_the_eviction_order():
    """vLLM takes only a hit's blocks out of the free queue: a run's blocks beyond the hit stay
    where they were, so an older conversation's blocks are evicted before them."""
    pool = GpuPool(10)
    assert pool.allocate(4)
    pool.release(4, conv=2, cache_blocks=4)  # conv 2 cached first: least recently used
    assert pool.allocate(6)
    pool.release(6, conv=1, cache_blocks=6)
    assert pool.take_cached(1, 4) == 4  # conv 1's next turn shares 4 of its 6 blocks
    assert (pool.free, pool.cached_units, pool.used) == (0, 6, 4)
    assert pool.allocate(3)  # conv 2's tail goes first, not conv 1's 2 leftover blocks
    assert pool.cached_blocks(2) == 1 and pool.evicted_blocks == 3
    assert pool.allocate(3)  # conv 2's last block, then the leftovers
    assert (pool.cached_blocks(2), pool.cached_units, pool.evicted_blocks) == (0, 0, 6)
    pool.check()


def test_host_lru_evicts_the_least_recent_conversation_from_its_tail():
    """vLLM 0.32.0's host pools rank a request's blocks tail to head (harness/sim/blocks.py):
    the least recently used conversation loses its last blocks first and keeps a usable prefix."""
    lru = PrefixLru(10)
    assert lru.store(1, 6) == 6
    assert lru.store(2, 4) == 4
    assert lru.lookup(1) == 6  # touch: conv 2 is now least recently used
    assert lru.store(3, 3) == 3  # needs 3 blocks: conv 2's last 3
    assert lru.lookup(2) == 1  # its first block is still a hit
    assert (lru.used, lru.evicted_blocks) == (10, 3)
    assert lru.lookup(1) == 6 and lru.lookup(3) == 3
    # storing conv 2's 4 blocks again makes it the most recent, writes the 3 it lost and takes
    # them from the tail of conv 1, now the least recently used
    assert lru.store(2, 4) == 3
    assert [(c, e.blocks) for c, e in lru.entries.items()] == [(1, 3), (3, 3), (2, 4)]
    lru.pinned.add(1)  # a running request needs conv 1's prefix: conv 3 goes instead
    assert lru.store(4, 3) == 3
    assert lru.lookup(3) == 0 and lru.lookup(1) == 3 and lru.used == 10
    assert lru.store(1, 2) == 0  # a shorter store refreshes, it does not shrink
    assert lru.lookup(1) == 3


# ------------------------------------------------------------------ chunked prefill


def test_chunked_prefill_shares_the_token_budget():
    s = sched(GpuResidency(100, 16), budget=100)
    a = req(0, 0, 250, out=2)
    s.add(a)
    sizes = []
    for t in range(3):
        batch = s.schedule(float(t))
        sizes.append([(x.req.rid, x.tokens, x.prefill) for x in batch])
        s.update(batch, t + 1.0)
    # 250 prompt tokens in chunks of 100, 100, 50; the last chunk samples the first token.
    assert sizes == [[(0, 100, True)], [(0, 100, True)], [(0, 50, True)]]
    assert a.out == 1 and a.first_token_at == 3.0
    b = req(1, 1, 40, out=2)
    s.add(b)
    batch = s.schedule(3.0)  # running decode first (1 token), then b's prefill (40)
    assert [(x.req.rid, x.tokens, x.prefill) for x in batch] == [(0, 1, False), (1, 40, True)]


def test_reserve_full_input_admission_blocks_fcfs():
    s = sched(GpuResidency(10, 16), budget=32)
    big, small = req(0, 0, 200), req(1, 1, 20)  # 200 tokens = 13 blocks > 10
    s.add(big)
    s.add(small)
    assert s.schedule(0.0) == []  # FCFS: the head does not fit, nothing behind it runs
    assert list(s.waiting) == [big, small]


# ------------------------------------------------------------------ prefix hits


def test_next_turn_hits_the_previous_turns_full_blocks():
    pol = GpuResidency(100, 16)
    s = sched(pol)
    t1 = req(0, 7, 100, out=20)  # 120 tokens computed-ish: 119 computed, 7 full blocks
    s.add(t1)
    run_until_done(s, [t1])
    assert pol.pool.cached_blocks(7) == 119 // 16 == 7
    t2 = req(1, 7, 150, out=4, turn=2)
    s.add(t2)
    batch = s.schedule(100.0)
    # 7 cached blocks = 112 tokens are hits; 38 prompt tokens are computed.
    assert batch[0].context == 112 and batch[0].tokens == 38
    assert s.counters.prefix_hits == 112 and t2.cached_at_start == 112


def test_last_prompt_token_is_never_a_hit():
    pol = GpuResidency(100, 16)
    pol.pool.allocate(4)
    pol.pool.release(4, conv=3, cache_blocks=4)  # 64 tokens cached
    r = req(0, 3, 64)
    assert pol.lookup(r).gpu_blocks == 3  # (64 - 1) // 16


# ------------------------------------------------------------------ preemption


def test_newest_running_request_is_preempted_first():
    pol = GpuResidency(9, 16)
    s = sched(pol, budget=1000)
    reqs = [req(i, i, 48, out=40) for i in range(3)]  # 48 tokens = 3 full blocks, pool 9
    for r in reqs:
        s.add(r)
    s.update(s.schedule(0.0), 1.0)  # all three prefilled; the 49th token needs a 4th block
    assert [r.blocks for r in reqs] == [3, 3, 3] and pol.pool.free == 0
    batch = s.schedule(1.0)  # request 0 needs a 4th block: the newest (2) is preempted
    assert s.counters.preemptions == 1 and reqs[2].preemptions == 1
    assert s.running == reqs[:2] and list(s.waiting) == [reqs[2]]
    assert [x.req.rid for x in batch] == [0, 1]
    # Its 3 blocks stayed in the prefix cache, then requests 0 and 1 each took one (tail first).
    assert reqs[2].computed == 0 and pol.pool.cached_blocks(2) == 1


def test_a_resumed_requests_hit_is_not_counted_in_the_prefix_cache_counters():
    """vLLM 0.32.0 counts a preempted request's lookups apart (preempted_queries/hits, not
    exported): /metrics' prefix-cache counters see only first admissions."""
    pol = GpuResidency(7, 16)
    s = sched(pol, budget=1000)
    a, b = req(0, 0, 48, out=10), req(1, 1, 48, out=30)  # 3 blocks each, 1 free
    s.add(a)
    s.add(b)
    s.update(s.schedule(0.0), 1.0)
    # a's 49th token takes the free block; b's finds none and b, the newest, preempts itself:
    # its 3 blocks stay cached, and a (58 tokens, 4 blocks) never needs them
    s.update(s.schedule(1.0), 2.0)
    assert b.preemptions == 1 and pol.pool.cached_blocks(1) == 3
    t, resumed = 2.0, []
    while not resumed:  # b needs 4 blocks (49 tokens): it waits for a to finish
        batch = s.schedule(t)
        resumed = [x for x in batch if x.req is b]
        t += 1.0
        s.update(batch, t)
        assert t < 100
    assert a.done and resumed[0].context == 48  # its 3 cached blocks were a hit ...
    # ... but the counters hold the two first admissions only: 2 x 48 queried, none hit
    assert (s.counters.prefix_queries, s.counters.prefix_hits) == (96, 0)


# ------------------------------------------------------------------ offloading


def test_offload_hit_is_reloaded_before_the_request_runs():
    h2d = Channel(1000.0)  # bytes per second
    pol = OffloadResidency(20, 16, cpu_blocks=50, block_bytes=100, h2d=h2d)
    pol.cpu.store(5, 6)  # 6 blocks of conv 5 in the CPU pool, none on the GPU
    s = sched(pol)
    r = req(0, 5, 100)
    s.add(r)
    assert s.schedule(0.0) == []  # 6 blocks x 100 B at 1000 B/s: loading until 0.6 s
    assert r.load_until == 0.6 and r.blocks == 6 and r.computed == 96
    assert list(s.waiting) == [r] and s.next_load_done() == 0.6
    assert s.schedule(0.5) == []
    batch = s.schedule(0.6)
    assert [(x.tokens, x.context) for x in batch] == [(4, 96)]  # only 4 tokens computed
    assert h2d.bytes_total == 600


def test_offload_lru_stores_on_finish():
    pol = OffloadResidency(20, 16, cpu_blocks=50, block_bytes=100, h2d=Channel(1e9))
    s = sched(pol)
    r = req(0, 2, 64, out=17)  # 80 tokens, 80 computed at finish? 64 + 16 -> 5 full blocks
    s.add(r)
    run_until_done(s, [r])
    assert pol.cpu.lookup(2) == r.computed // 16 == 5


# ------------------------------------------------------------------ HiSparse


def hisparse(pool: int) -> HiSparseResidency:
    # resident block: 4 latent + 1 indexer units; host-resident request: 1 unit per block
    # plus a lease of 6 units (hot buffer + retained tail).
    return HiSparseResidency(
        pool,
        16,
        latent_units=4,
        indexer_units=1,
        lease_units=6,
        host_blocks=100,
        indexer_cpu_blocks=100,
        indexer_block_bytes=10,
        h2d=Channel(1e9),
    )


def test_hot_buffer_is_leased_under_pressure_and_released_at_finish():
    pol = hisparse(60)
    s = sched(pol, budget=1000)
    a, b = req(0, 0, 160, out=30), req(1, 1, 96, out=30)  # 10 and 6 blocks
    s.add(a)
    s.update(s.schedule(0.0), 1.0)  # a resident: 10 blocks x 5 = 50 units
    assert a.units == 50 and not a.offloaded
    s.add(b)
    s.update(s.schedule(1.0), 2.0)
    # a's decode takes an 11th block (55 units, 5 free). b's 6 blocks need 30 > 5: a goes
    # host-resident, keeping 11 indexer units + a lease of 6 = 17 (saving 11 x 4 - 6 = 38);
    # b is resident with 30: 47 of 60 used.
    assert a.offloaded and a.lease == 6 and a.units == 17 and not b.offloaded
    assert pol.pool.used == a.units + b.units == 47 and pol.conversions == 1
    assert pol.host.lookup(0) == 10  # a's history was mirrored (no transfer on the switch)
    run_until_done(s, [a, b])
    # a's units are freed (nothing cached on the GPU for host-only history); b's are cached.
    assert pol.pool.used == 0 and pol.pool.cached_units == pol.pool.cached_blocks(1) * 5
    pol.pool.check()


def test_hisparse_host_hit_reloads_only_the_indexer():
    pol = hisparse(200)
    pol.host.store(4, 8)
    pol.indexer_cpu.store(4, 8)
    r = req(0, 4, 140)
    hit = pol.lookup(r)
    assert (hit.gpu_blocks, hit.external_blocks, hit.load_bytes, hit.offloaded) == (0, 8, 80, True)


# ------------------------------------------------------------------ MTP


def test_mtp_verify_width_and_acceptance_length():
    m = Mtp(3, 2.5)
    assert m.verify_width == 4
    emitted = [m.emitted(k) for k in range(8)]
    assert emitted == [2, 3, 2, 3, 2, 3, 2, 3] and sum(emitted) / 8 == 2.5
    s = sched(GpuResidency(100, 16), spec=3, acc=2.5)
    r = req(0, 0, 30, out=11)
    s.add(r)
    s.update(s.schedule(0.0), 1.0)  # prefill + first token
    batch = s.schedule(1.0)
    assert [(x.tokens, x.prefill) for x in batch] == [(4, False)]
    s.update(batch, 2.0)
    assert r.out == 3 and s.counters.drafts == 1 and s.counters.accepted == 1
    run_until_done(s, [r])
    # 10 tokens after the first: steps emit 2, 3, 2, 3 -> the last is capped at 11 - 10 = 1.
    assert r.out == 11 and r.decode_steps == 4
