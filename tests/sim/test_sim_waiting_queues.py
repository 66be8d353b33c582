"""vLLM 0.32.0's waiting queues and admission count, by hand (docs/simulator.md §2).

* Requests holding KV blocks (admitted for an asynchronous load) are scheduled before the other
  waiting requests: vLLM keeps them in `kv_holding_waiting` and drains it first
  (`v1/core/sched/scheduler.py` schedule). In one FCFS queue a head that cannot be admitted
  blocked a loaded request behind it, whose blocks it needed, and the simulated engine stalled
  with nothing running.
* Admission counts a GPU prefix hit's blocks as well as the new ones: the hit's blocks sit
  evictable in the free count until the request takes them (`v1/core/single_type_kv_cache_
  manager.py` get_num_blocks_to_allocate: new + evictable computed blocks).
"""

from __future__ import annotations

from harness.sim.mtp import Mtp
from harness.sim.request import Request
from harness.sim.residency import Channel, GpuResidency, OffloadResidency
from harness.sim.scheduler import Scheduler


def _sched(pol) -> Scheduler:
    return Scheduler(pol, max_num_seqs=8, max_num_batched_tokens=1000, mtp=Mtp(0, 1.0))


def test_a_loaded_request_runs_before_a_head_that_cannot_be_admitted():
    # 16-token blocks, a GPU pool of 20 blocks; conv 5 has 6 blocks (96 tokens) in the CPU pool
    pol = OffloadResidency(20, 16, cpu_blocks=50, block_bytes=100, h2d=Channel(1000.0))
    s = _sched(pol)
    pol.cpu.store(5, 6)
    loaded = Request(1, 5, 2, 100, 4, 0.0)
    s.add(loaded)
    assert s.schedule(0.0) == []  # admitted: it holds the 6 blocks it loads 600 B into, to 0.6 s
    assert loaded.blocks == 6 and loaded.load_until == 0.6
    # a request preempted back to the head of the queue: 300 + 4 tokens need 19 blocks, 14 free
    head = Request(0, 9, 1, 300, 4, 0.0)
    s.waiting.appendleft(head)
    batch = s.schedule(0.6)
    # the loaded request computes its 4 uncached prompt tokens; the head still waits, holding
    # nothing (in one FCFS queue the head blocked it and nothing ran)
    assert [(x.req.rid, x.tokens, x.context) for x in batch] == [(1, 4, 96)]
    assert list(s.waiting) == [head] and head.blocks == 0


def test_admission_counts_the_hit_blocks_still_in_the_free_count():
    pol = GpuResidency(12, 16)
    s = _sched(pol)
    other = Request(0, 2, 1, 32, 100, 0.0)  # 2 blocks, decodes for a long time
    first = Request(1, 1, 1, 96, 4, 0.0)  # 6 blocks (96 prompt + 4 output: 100 tokens)
    s.add(other)
    s.add(first)
    t = 0.0
    while not first.done:
        t += 1.0
        s.update(s.schedule(t - 1.0), t)
    # first's 6 full blocks stay cached (evictable); other holds 3 blocks now; 3 are free
    assert pol.pool.cached_blocks(1) == 6
    nxt = Request(2, 1, 2, 160, 4, t)  # turn 2: 10 blocks of input, 6 of them a GPU hit
    hit = pol.lookup(nxt)
    assert hit.gpu_blocks == 6
    # 10 blocks (4 new + the 6 hit blocks, evictable until taken) > 9 available (3 free + 6
    # cached): not admitted, and its hit stays cached for later; counting only the 4 new
    # blocks admitted it, took the 6 and then failed to grow by 4 with 3 free.
    assert pol.admission_units(nxt, hit) == 10
    assert pol.pool.available() == 9
    s.add(nxt)
    assert [x.req.rid for x in s.schedule(t)] == [0]
    assert nxt.blocks == 0 and pol.pool.cached_blocks(1) == 6
