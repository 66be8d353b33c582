"""HiSparse residency and offload stores as vLLM 0.32.0 runs them (issue 24 item 3), by hand:
lazy unpin (`BlockPool.unpin_blocks`), the coordinator's switch conditions, page reuse as the
only source of misses, staging of the missing rows only, and per-step offload stores."""

from __future__ import annotations

import pytest

from harness.sim.blocks import GpuPool
from harness.sim.cost import step_stats
from harness.sim.request import Request
from harness.sim.residency import Channel, GpuResidency, HiSparseResidency, OffloadResidency
from harness.sim.scheduler import Scheduled


def test_unpinned_pages_count_as_free_and_are_reused_last():
    pool = GpuPool(100)
    assert pool.allocate(30)
    pool.release(10, conv=7, cache_blocks=10, units_per_block=1)  # 10 prefix-cached units
    pool.unpin(1, 2, 10)  # 2 pages of 10 units handed back, still readable by conv 1
    assert (pool.free, pool.cached_units, pool.copy_units, pool.used) == (70, 10, 20, 0)
    assert pool.available() == 100
    assert pool.allocate(85)  # free 70, then the cached 10, then one 10-unit page of conv 1
    assert pool.cached_units == 0 and pool.copy_blocks(1) == 1 and pool.lost_blocks == 1
    pool.check()


def _hisparse(pool_units: int = 1000) -> HiSparseResidency:
    # a block = 4 latent pages + 1 indexer page; hot region 20 pages; window 8 blocks
    return HiSparseResidency(
        pool_units,
        64,
        latent_units=4,
        indexer_units=1,
        lease_units=20,
        host_blocks=1000,
        indexer_cpu_blocks=1000,
        indexer_block_bytes=100,
        h2d=Channel(1.0),
        lazy_unpin=True,
        window_blocks=8,
    )


def _running(pol: HiSparseResidency, rid: int, tokens: int) -> Request:
    req = Request(rid, rid, 1, tokens + 100, 220, 0.0)
    assert pol.grow(req, tokens)
    req.computed = tokens
    pol.running.append(req)
    return req


def test_a_request_reads_from_host_once_it_fills_its_admission_window():
    pol = _hisparse()
    assert pol.watermark == 100  # max(hot region 20, 1000 // 10)
    small = _running(pol, 1, 4 * 64)
    pol.on_step(small)
    assert not small.offloaded and small.units == 4 * 5  # pool not low, below the window
    big = _running(pol, 2, 8 * 64)
    pol.on_step(big)
    # at the window: a hot region (20), and the 8 - 2 tail pages' latent (6 x 4) unpinned
    assert big.offloaded and big.lease == 20
    assert big.units == 8 * 5 + 20 - 6 * 4 and pol.pool.copy_blocks(2) == 6
    assert pol.missing_fraction(big) == 0.0  # unpinned pages are still readable


def test_a_low_pool_switches_requests_to_host_reads():
    pol = _hisparse(300)  # watermark max(20, 300 // 10) = 30
    first = _running(pol, 1, 4 * 64)  # 20 units
    _running(pol, 2, 7 * 64)  # 7 blocks (below the window): 35 units; 245 left >= 30
    pol.on_step(first)
    assert not first.offloaded
    assert pol.pool.allocate(220)  # 25 left < 30: the next pass switches it (hot region 20)
    pol.on_step(first)
    assert first.offloaded and pol.pool.copy_blocks(1) == 2  # 4 blocks - 2 tail pages


def test_misses_and_staging_follow_page_reuse():
    pol = _hisparse()
    req = _running(pol, 1, 8 * 64)
    pol.on_step(req)  # 6 blocks unpinned, readable
    assert pol.pool.free == 1000 - (8 * 5 + 20 - 6 * 4) - 6 * 4
    assert pol.pool.allocate(pol.pool.free)  # every free unit: the unpinned pages survive
    assert pol.pool.copy_blocks(1) == 6 and pol.missing_fraction(req) == 0.0
    assert pol.pool.allocate(8)  # two pages of conv 1 reused (tail first)
    assert pol.pool.copy_blocks(1) == 4 and pol.pool.lost_blocks == 2
    assert pol.missing_fraction(req) == pytest.approx(2 / 8)
    decode = Scheduled(req, 4, False, req.computed)
    s = step_stats([decode], topk=2048, verify_width=4, missing=pol.missing_fraction)
    assert s.hot_rows == 2048 * 4 and s.offloaded_rows == pytest.approx(2048 * 4 * 0.25)
    prefill = Scheduled(req, 753, True, req.computed)
    s = step_stats([prefill], topk=2048, verify_width=4, missing=pol.missing_fraction)
    assert s.staged_rows == pytest.approx(512 * 0.25)  # only the missing rows are staged


def test_the_offloading_connector_stores_every_step():
    def offload(every: bool) -> OffloadResidency:
        return OffloadResidency(100, 64, cpu_blocks=50, block_bytes=10, h2d=Channel(1.0),
                       store_every_step=every)  # fmt: skip

    for every, stored in ((True, 3), (False, 0)):
        pol = offload(every)
        req = Request(1, 5, 1, 1000, 220, 0.0)
        assert pol.grow(req, 200)
        req.computed = 200  # 3 full blocks of 64
        pol.on_step(req)
        assert pol.cpu.lookup(5) == stored and pol.stored_bytes == stored * 10


def test_beside_hisparse_the_connector_copies_only_indexer_pages():
    pol = _hisparse()
    pol.copy_pages = 3  # the indexer's layer pages per block
    req = _running(pol, 1, 640)  # 10 full blocks
    pol.release(req)
    pol.on_release(req)  # the connector stores the indexer KV of the 10 blocks
    assert pol.indexer_cpu.lookup(1) == 10 and pol.copies_submitted == 10 * 3
    # a new request of that conversation finds them only in the host pools: it loads the
    # indexer KV of the 10 blocks (the latent stays on the host, read as top-K misses)
    while pol.pool.cached_blocks(1):
        assert pol.pool.allocate(pol.pool.available())  # reuse every cached page
    nxt = Request(2, 1, 2, 700, 220, 1.0)
    hit = pol.lookup(nxt)
    assert (hit.gpu_blocks, hit.external_blocks, hit.load_bytes) == (0, 10, 10 * 100)
    assert pol.start_load(1.0, hit) == pytest.approx(1.0 + 1000.0)  # 1,000 B at 1 B/s
    assert pol.copies_submitted == 10 * 3 + 10 * 3


def test_beside_hisparse_the_connector_stores_the_indexer_kv_every_step():
    for every, stored in ((True, 3), (False, 0)):
        pol = _hisparse()
        pol.copy_pages = 3
        pol.store_every_step = every
        req = _running(pol, 1, 200)  # 3 full blocks of 64 and a partial one
        pol.on_step(req)
        assert pol.indexer_cpu.lookup(1) == stored and pol.copies_submitted == stored * 3
        req.computed = 256  # a 4th block completes: only it is new
        pol.on_step(req)
        assert pol.copies_submitted == (4 * 3 if every else 0)
        pol.release(req)  # the last store writes what the steps have not
        assert pol.indexer_cpu.lookup(1) == 4 and pol.copies_submitted == 4 * 3


def test_with_an_mtp_drafter_the_last_block_of_a_hit_is_recomputed():
    # vLLM 0.32.0 find_longest_cache_hit(drop_eagle_block): with an EAGLE/MTP drafter the hit
    # stops one block short, whichever cache found it. A 600-token prompt whose conversation
    # has 4 blocks of 128 cached could hit (600 - 1) // 128 = 4: 3 with the drafter.
    gpu = GpuResidency(20, 128)
    done = Request(0, conv=7, turn=1, prompt=520, max_out=10, arrival=0.0)
    assert gpu.grow(done, 530)
    done.computed, done.out = 529, 10
    gpu.release(done)
    nxt = Request(1, conv=7, turn=2, prompt=600, max_out=10, arrival=0.0)
    assert gpu.lookup(nxt).gpu_blocks == 4
    gpu.drop_last_hit_block = True
    assert gpu.lookup(nxt).gpu_blocks == 3
    # GPU 2 blocks, CPU 4: the hit is 4 long without the drafter (2 + 2 loaded), 3 with it,
    # and the block given up is a loaded one
    off = OffloadResidency(100, 128, cpu_blocks=50, block_bytes=10, h2d=Channel(1.0))
    off.cpu.store(7, 4)
    off.pool.release(2, conv=7, cache_blocks=2)
    assert (off.lookup(nxt).gpu_blocks, off.lookup(nxt).external_blocks) == (2, 2)
    off.drop_last_hit_block = True
    hit = off.lookup(nxt)
    assert (hit.gpu_blocks, hit.external_blocks, hit.load_bytes) == (2, 1, 10)
    # a hit of one block leaves nothing
    one = Request(2, conv=8, turn=2, prompt=300, max_out=10, arrival=0.0)
    gpu.pool.release(1, conv=8, cache_blocks=1)
    assert gpu.lookup(one).gpu_blocks == 0
