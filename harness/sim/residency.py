"""Where a request's KV lives: GPU only, conventional offloading, or Hybrid HiSparse.

A residency owns the GPU pool and the host pools, answers where a prefix hit comes from and what it
costs to load, and sizes what a request takes from the pool. The scheduler calls it; it never
decides what runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness import metric_names as mn
from harness.sim.blocks import GpuPool, PrefixLru
from harness.sim.request import Request

ACTIVE_TAIL_PAGES = 2  # vLLM 0.32.0 v1/hisparse/types.py: tail pages a request keeps pinned


@dataclass(frozen=True)
class Hit:
    gpu_blocks: int  # blocks found in the GPU prefix cache
    external_blocks: int  # further blocks found in a host pool
    load_bytes: int  # per TP rank, to copy before the request can run (0: none)
    offloaded: bool = False  # HiSparse: the request starts with host-only history


class Channel:
    """One PCIe direction per rank: transfers queue behind each other."""

    def __init__(self, bytes_per_s: float) -> None:
        self.bytes_per_s = bytes_per_s
        self.free_at = 0.0
        self.bytes_total = 0

    def transfer(self, now: float, nbytes: int) -> float:
        start = max(now, self.free_at)
        self.free_at = start + nbytes / self.bytes_per_s
        self.bytes_total += nbytes
        return self.free_at


def submit_load(residency: GpuResidency, h2d: Channel, now: float, hit: Hit) -> float:
    """A host hit's copy: it starts once the worker has submitted its descriptors, then queues
    on the host-to-device stream; returns when it is done."""
    copies = hit.external_blocks * residency.copy_pages
    residency.copies_submitted += copies
    return h2d.transfer(now + copies * residency.copy_submit_s, hit.load_bytes)


class GpuResidency:
    """vLLM with prefix caching and no connector: a block costs one unit."""

    name = "gpu"

    def __init__(self, pool_units: int, block_tokens: int, prefix_caching: bool = True) -> None:
        self.pool = GpuPool(pool_units)
        self.block_tokens = block_tokens
        self.prefix_caching = prefix_caching
        self.resident_units = 1
        self.running: list[Request] = []
        # Copy descriptors the connector's worker has submitted (loads and stores): the engine
        # charges their submission time (`Engine.step_duration`). No connector: none.
        self.copies_submitted = 0
        self.copy_pages = 0  # descriptors per block moved (pool.connector_pages_per_block)
        self.copy_submit_s = 0.0  # worker CPU per descriptor (the engine sets its cost model's)
        # With an EAGLE/MTP drafter vLLM recomputes the last block of every prefix hit: the
        # drafter needs the hidden states of the tokens before the generation point (vLLM
        # 0.32.0 `v1/core/single_type_kv_cache_manager.py` find_longest_cache_hit,
        # drop_eagle_block). The scheduler trace found it (docs/simulator.md §6c).
        self.drop_last_hit_block = False

    def start_load(self, now: float, hit: Hit) -> float:
        """Submit the copy of a host hit's blocks; when it is done. Without a host pool there is
        nothing to load."""
        return now

    # -- sizes
    def block_units(self, req: Request) -> int:
        return self.resident_units

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_tokens)

    def full_blocks(self, req: Request) -> int:
        return req.computed // self.block_tokens

    def max_hit_blocks(self, req: Request) -> int:
        """vLLM never serves the last prompt token from cache: it must be computed. A request
        with a hit cap (a prompt that diverges from the stored history) hits only its matching
        blocks, and those it computed itself before a preemption: vLLM keeps a preempted
        request's blocks in its prefix cache and finds them on readmission."""
        if not self.prefix_caching:
            return 0
        whole = (req.total - 1) // self.block_tokens
        if req.hit_cap_blocks is None:
            return whole
        own = req.computed_before_preemption // self.block_tokens
        return min(whole, max(req.hit_cap_blocks, own))

    def hit_cap(self, *found: int) -> int:
        """The blocks a hit can take, given what each cache found (already capped by
        max_hit_blocks): the longest, one block short with an EAGLE/MTP drafter."""
        top = max(found)
        return top - 1 if self.drop_last_hit_block and top > 0 else top

    # -- admission
    def lookup(self, req: Request) -> Hit:
        gpu = min(self.pool.cached_blocks(req.conv), self.max_hit_blocks(req))
        return Hit(self.hit_cap(gpu), 0, 0)

    def admission_units(self, req: Request, hit: Hit) -> int:
        """Units the whole input needs (reserve-full-input admission): its new blocks and its GPU
        hit's, which stay in the free count (evictable) until the request takes them: vLLM 0.32.0
        `v1/core/single_type_kv_cache_manager.py` get_num_blocks_to_allocate counts new plus
        evictable hit blocks. Counting the new ones alone admitted a request whose growth then
        failed, and a queue of them stalled."""
        return self.blocks_for(req.total) * self.resident_units

    def first_chunk_fits(self, req: Request, hit: Hit, tokens: int) -> bool:
        """Whether an admitted request's first allocation, `tokens` slots with its hit's
        blocks among them, fits the free and evictable units (vLLM 0.32.0 `allocate_slots`
        counts a hit's evictable blocks as needed, like `admission_units`)."""
        return self.blocks_for(tokens) * self.resident_units <= self.pool.available()

    def remaining_units(self, req: Request, tokens: int) -> int:
        """Units req still needs to hold `tokens` (vLLM 0.32.0 `v1/core/sched/scheduler.py`
        _request_remaining_blocks)."""
        return max(0, self.blocks_for(tokens) - req.blocks) * self.resident_units

    def hit_units(self, hit: Hit) -> int:
        """Units taking a hit removes from the free count: its GPU blocks (evictable until
        taken) and the blocks an external hit is loaded into."""
        return (hit.gpu_blocks + hit.external_blocks) * self.resident_units

    def start(self, req: Request, hit: Hit) -> None:
        """Attach the GPU hit to the request (its units leave the free queue)."""
        units = self.pool.take_cached(req.conv, hit.gpu_blocks) if hit.gpu_blocks else 0
        req.blocks, req.units = hit.gpu_blocks, units
        req.computed = hit.gpu_blocks * self.block_tokens

    def attach_external(self, req: Request, hit: Hit) -> bool:
        """Allocate the blocks an external hit is loaded into; False if they do not fit."""
        return hit.external_blocks == 0

    # -- growth
    def grow(self, req: Request, tokens: int) -> bool:
        """Make room for `tokens` computed tokens; False: the caller must preempt."""
        need = self.blocks_for(tokens) - req.blocks
        if need <= 0:
            return True
        units = need * self.block_units(req)
        if not self.pool.allocate(units):
            return False
        req.blocks += need
        req.units += units
        return True

    # -- release
    def release(self, req: Request) -> None:
        """Free (finish or preemption); full computed blocks stay in the prefix cache."""
        cache = min(self.full_blocks(req), req.blocks) if self.prefix_caching else 0
        if req.offloaded or self.history_unpinned(req):
            cache = 0  # host-only history: nothing worth caching on the GPU
        self.on_release(req)
        self.pool.release(
            req.units, conv=req.conv, cache_blocks=cache, units_per_block=self.block_units(req)
        )
        req.blocks = req.units = req.lease = 0
        req.offloaded = False

    def on_release(self, req: Request) -> None:
        """Residency hook: store to host pools."""

    def on_computed(self, req: Request) -> None:
        """Residency hook after a step advanced the request."""

    def on_step(self, req: Request) -> None:
        """Residency hook after every step that scheduled the request (residency, stores)."""

    def history_unpinned(self, req: Request) -> bool:
        """Whether the request's history pages were handed back to the pool (lazy unpin)."""
        return False

    def missing_fraction(self, req: Request) -> float:
        """Share of a host-resident request's history not readable on the GPU."""
        return 1.0 if req.offloaded else 0.0

    def relieve(self, units: int, requester: Request) -> bool:
        """Residency hook: make `units` available without preemption (HiSparse)."""
        return False

    def gauges(self) -> dict[str, float]:
        return {}


class OffloadResidency(GpuResidency):
    """OffloadingConnector: a CPU LRU pool per TP rank; hits load over PCIe before running.

    Neither copy direction's transfer costs the engine's step in vLLM 0.32.0 (their submission
    does, where the GPU cannot hide it: `copies_submitted`, `Engine.step_duration`): loads and
    stores queue on per-direction copy streams (vLLM 0.32.0 `v1/kv_offload/cpu/gpu_worker.py`
    transfer_async), stores deferred to the next step (vLLM 0.32.0 `distributed/kv_transfer/
    kv_connector/v1/offloading/worker.py` prepare_store_kv); before a step the worker waits only for
    `jobs_to_flush` (the same file, handle_preemptions): a preempted request's stores, or a
    finished one's whose blocks the step reallocates. A load is the waiting request's time
    (`h2d`), a store nobody's. The pool is per rank, which reproduces the published offloading
    collapse at c16-c32; vLLM 0.32.0 keeps one copy of the TP-replicated MLA KV for all ranks
    (vLLM 0.32.0 `distributed/kv_transfer/kv_connector/v1/offloading/config.py`
    replicated_layout), TP times the pool, with which nothing is recomputed there
    (docs/simulator.md §6a).
    """

    name = "offload"

    def __init__(
        self,
        pool_units: int,
        block_tokens: int,
        *,
        cpu_blocks: int,
        block_bytes: int,
        h2d: Channel,
        prefix_caching: bool = True,
        store_every_step: bool = False,
        copy_pages: int = 0,
    ) -> None:
        super().__init__(pool_units, block_tokens, prefix_caching)
        self.cpu = PrefixLru(cpu_blocks)
        self.block_bytes = block_bytes
        self.h2d = h2d
        self.stored_bytes = 0
        self.store_every_step = store_every_step
        self.copy_pages = copy_pages

    def start_load(self, now: float, hit: Hit) -> float:
        return submit_load(self, self.h2d, now, hit)

    def _store(self, req: Request, full: int) -> None:
        written = self.cpu.store(req.conv, full)
        self.stored_bytes += written * self.block_bytes
        self.copies_submitted += written * self.copy_pages

    def on_step(self, req: Request) -> None:
        # vLLM 0.32.0 OffloadingConnector stores a request's newly completed blocks from every
        # step's scheduler output (`distributed/kv_transfer/kv_connector/v1/offloading_connector
        # .py`), not only when it is freed: its prefix is in the CPU pool while it runs.
        if self.store_every_step:
            self._store(req, min(self.full_blocks(req), req.blocks))

    def lookup(self, req: Request) -> Hit:
        gpu = min(self.pool.cached_blocks(req.conv), self.max_hit_blocks(req))
        cpu = min(self.cpu.lookup(req.conv), self.max_hit_blocks(req))
        cap = self.hit_cap(gpu, cpu)
        gpu = min(gpu, cap)
        ext = max(0, min(cpu, cap) - gpu)
        return Hit(gpu, ext, ext * self.block_bytes)

    def attach_external(self, req: Request, hit: Hit) -> bool:
        if hit.external_blocks == 0:
            return True
        units = hit.external_blocks * self.resident_units
        if not self.pool.allocate(units):
            return False
        req.blocks += hit.external_blocks
        req.units += units
        return True

    def on_release(self, req: Request) -> None:
        self._store(req, min(self.full_blocks(req), req.blocks))


class HiSparseResidency(GpuResidency):
    """Hybrid HiSparse: one GPU page pool; requests go host-resident only under pressure.

    Units are HiSparse GPU pages. A resident block costs its latent pages plus its indexer
    page; a request with host-only history keeps only indexer pages (the indexer KV is always
    resident and grows) plus a lease of hot-buffer and retained-tail pages from the same pool.
    Completed blocks are mirrored to the host pool eagerly, so going host-resident moves no
    bytes. Prefix hits from the host need only the indexer KV reloaded (the 128 GiB offloading
    pool holds it); the latent stays on the host and is read as top-K misses.
    """

    name = "hisparse"

    def __init__(
        self,
        pool_units: int,
        block_tokens: int,
        *,
        latent_units: int,
        indexer_units: int,
        lease_units: int,
        host_blocks: int,
        indexer_cpu_blocks: int,
        indexer_block_bytes: int,
        h2d: Channel,
        prefix_caching: bool = True,
        lazy_unpin: bool = False,
        window_blocks: int = 512,
        copy_pages: int = 0,
        store_every_step: bool = False,
    ) -> None:
        super().__init__(pool_units, block_tokens, prefix_caching)
        self.copy_pages = copy_pages  # the indexer's pages: the connector holds only them here
        self.store_every_step = store_every_step
        self.lazy_unpin = lazy_unpin
        # vLLM 0.32.0 `v1/hisparse/coordinator.py` update_residency: a request starts reading
        # from host (asks for a hot region) once the pool's free pages fall below
        # transition_watermark = max(hot cost, num_blocks // 10), or once it holds the resident
        # pages admission reserved for it (max_admission_blocks_per_request: the in-flight
        # window, cdiv(max_num_batched_tokens, block) in v1/kv_cache_interface.py).
        self.watermark = max(lease_units, pool_units // 10)
        self.window_blocks = window_blocks
        self.unpinned: dict[int, int] = {}  # rid -> its history blocks not pinned by it
        self.latent_units = latent_units
        self.indexer_units = indexer_units
        self.resident_units = latent_units + indexer_units
        self.lease_units = lease_units
        self.host = PrefixLru(host_blocks)
        self.indexer_cpu = PrefixLru(indexer_cpu_blocks)
        self.indexer_block_bytes = indexer_block_bytes
        self.h2d = h2d
        self.conversions = 0

    def block_units(self, req: Request) -> int:
        if req.offloaded and not self.lazy_unpin:
            return self.indexer_units
        return self.resident_units  # lazy: new pages are pinned until clean, then unpinned

    def _store_indexer(self, req: Request) -> None:
        full = self.full_blocks(req)
        self.copies_submitted += self.indexer_cpu.store(req.conv, full) * self.copy_pages

    # -- lazy unpin (vLLM 0.32.0 coordinator): pages stay readable until the pool reuses them
    def on_step(self, req: Request) -> None:
        if self.store_every_step:
            # Beside HiSparse the OffloadingConnector manages only the indexer groups (vLLM
            # 0.32.0 `distributed/kv_transfer/kv_connector/v1/offloading/config.py`
            # get_offloading_group_ids) and stores their newly completed blocks every step
            # (`offloading/scheduler.py` build_connector_meta), as OffloadResidency.on_step.
            self._store_indexer(req)
        if not self.lazy_unpin:
            return
        if not req.offloaded:
            if self.pool.available() >= self.watermark and req.blocks < self.window_blocks:
                return
            if not self._lease_hot(req):
                return  # no room for a hot region yet: pages stay pinned
        self._unpin_clean(req)

    def history_unpinned(self, req: Request) -> bool:
        return self.unpinned.get(req.rid, 0) > 0

    def _lease_hot(self, req: Request) -> bool:
        if not self.pool.allocate(self.lease_units):
            return False
        req.units += self.lease_units
        req.lease = self.lease_units
        req.offloaded = True
        self.conversions += 1
        return True

    def _unpin_clean(self, req: Request) -> None:
        """Hand every clean sealed page but the active tail to the pool (`_unpin_clean_pages`):
        eager host mirror makes a completed page clean; ACTIVE_TAIL_PAGES = 2 stay pinned."""
        full = min(self.full_blocks(req), req.blocks)
        self.host.store(req.conv, full)
        clean = max(0, full - ACTIVE_TAIL_PAGES)
        done = self.unpinned.get(req.rid, 0)
        pinned_latent = (req.units - req.lease - req.blocks * self.indexer_units) // max(
            1, self.latent_units
        )
        move = min(clean - done, pinned_latent)
        if move > 0:
            self.pool.unpin(req.conv, move, self.latent_units)
            req.units -= move * self.latent_units
            self.unpinned[req.rid] = done + move

    def missing_fraction(self, req: Request) -> float:
        """Lazy: the share of the history whose unpinned pages the pool has reused; else all
        of a host-resident request's history (the constant-miss model)."""
        if not self.lazy_unpin:
            return 1.0 if req.offloaded else 0.0
        unpinned = self.unpinned.get(req.rid, 0)
        if unpinned == 0 or req.blocks == 0:
            return 0.0
        readable = req.blocks - unpinned + min(unpinned, self.pool.copy_blocks(req.conv))
        return 1.0 - readable / req.blocks

    def lookup(self, req: Request) -> Hit:
        gpu = min(self.pool.cached_blocks(req.conv), self.max_hit_blocks(req))
        host = min(
            self.host.lookup(req.conv), self.indexer_cpu.lookup(req.conv), self.max_hit_blocks(req)
        )
        cap = self.hit_cap(gpu, host)
        gpu = min(gpu, cap)
        ext = max(0, min(host, cap) - gpu)
        return Hit(gpu, ext, ext * self.indexer_block_bytes, offloaded=ext > 0)

    def admission_units(self, req: Request, hit: Hit) -> int:
        total = self.blocks_for(req.total)
        if self.lazy_unpin:
            # Admission reserves the in-flight window of resident pages (older ones move to
            # host as they turn clean) and the indexer pages of a host hit; a hot region is
            # allocated later, on a scheduling pass (coordinator update_residency).
            new = min(total - hit.gpu_blocks - hit.external_blocks, self.window_blocks)
            need = new * self.resident_units + hit.external_blocks * self.indexer_units
            return max(0, need - self.reclaimable(exclude=req))
        resident = (total - hit.gpu_blocks) * self.resident_units
        offloaded = (
            total * self.indexer_units + self.lease_units - hit.gpu_blocks * (self.resident_units)
        )
        need = min(resident, offloaded)
        # Pages that host-resident decoding would hand back also count as room.
        return max(0, need - self.reclaimable(exclude=req))

    def first_chunk_fits(self, req: Request, hit: Hit, tokens: int) -> bool:
        """HiSparse grows by relieving the pool (requests go host-resident), which this
        check cannot foresee: its admission is `admission_units` alone."""
        return True

    def remaining_units(self, req: Request, tokens: int) -> int:
        """Lazy: vLLM caps the resident (latent) blocks a request is counted for at its
        admission window (`apply_admission_cap`); the indexer group is not capped."""
        if not self.lazy_unpin:
            return super().remaining_units(req, tokens)
        total = self.blocks_for(tokens)
        latent = max(0, min(total, self.window_blocks) - min(req.blocks, self.window_blocks))
        return max(0, total - req.blocks) * self.indexer_units + latent * self.latent_units

    def hit_units(self, hit: Hit) -> int:
        if not self.lazy_unpin:
            return hit.gpu_blocks * self.resident_units + (
                hit.external_blocks * self.indexer_units + self.lease_units
                if hit.external_blocks
                else 0
            )
        return hit.gpu_blocks * self.resident_units + hit.external_blocks * self.indexer_units

    def reclaimable(self, exclude: Request | None = None) -> int:
        return sum(self._saving(r) for r in self.running if r is not exclude)

    def _saving(self, req: Request) -> int:
        if req.offloaded or req.blocks == 0:
            return 0
        return req.blocks * self.latent_units - self.lease_units

    def attach_external(self, req: Request, hit: Hit) -> bool:
        if hit.external_blocks == 0:
            return True
        if self.lazy_unpin:
            return self._attach_lazy(req, hit)
        units = hit.external_blocks * self.indexer_units + self.lease_units
        drop = req.blocks * self.latent_units  # GPU-hit blocks keep only their indexer pages
        if units > drop and not self.pool.allocate(units - drop):
            return False
        if drop > units:
            self.pool.release(drop - units)
        req.blocks += hit.external_blocks
        req.units += units - drop
        req.lease = self.lease_units
        req.offloaded = True
        self.host.pinned.add(req.conv)
        return True

    def _attach_lazy(self, req: Request, hit: Hit) -> bool:
        """A host prefix hit: indexer pages for the whole prefix; the GPU copies of its pages
        that the pool has not reused yet stay readable (`copies` in the coordinator), the
        GPU-hit pages are unpinned too. Its first step stages only the missing rows; the hot
        region comes with the first scheduling pass after it (`on_step`)."""
        need = hit.external_blocks * self.indexer_units
        if not self.pool.allocate(need):
            return False
        self.pool.touch_copies(req.conv)
        self.pool.unpin(req.conv, req.blocks, self.latent_units)
        req.units += need - req.blocks * self.latent_units
        req.blocks += hit.external_blocks
        self.unpinned[req.rid] = req.blocks
        self.host.pinned.add(req.conv)
        return True

    def grow(self, req: Request, tokens: int) -> bool:
        need = self.blocks_for(tokens) - req.blocks
        if need <= 0:
            return True
        units = need * self.block_units(req)
        if self.pool.available() < units:
            self.relieve(units, req)
            units = need * self.block_units(req)  # the requester may have gone host-resident
        return super().grow(req, tokens)

    def relieve(self, units: int, requester: Request) -> bool:
        """Send resident running requests host-resident, largest first, until `units` fit."""
        candidates = sorted(
            (r for r in [*self.running, requester] if self._saving(r) > 0),
            key=lambda r: (-self._saving(r), r.rid),
        )
        seen: set[int] = set()
        for victim in candidates:
            if self.pool.available() >= units:
                break
            if victim.rid in seen:
                continue
            seen.add(victim.rid)
            self.offload_request(victim)
        return self.pool.available() >= units

    def offload_request(self, req: Request) -> None:
        """Give up the latent pages of req's history (already mirrored); lease a hot buffer."""
        if self.lazy_unpin:
            if self._lease_hot(req):
                self._unpin_clean(req)
            return
        saving = self._saving(req)
        if saving <= 0:
            return
        self.host.store(req.conv, self.full_blocks(req))
        self.host.pinned.add(req.conv)
        self.pool.release(saving)
        req.units -= saving
        req.lease = self.lease_units
        req.offloaded = True
        self.conversions += 1

    def on_computed(self, req: Request) -> None:
        # Eager host mirror of completed blocks (write-back: no GPU page is given up here).
        self.host.store(req.conv, self.full_blocks(req))

    def on_release(self, req: Request) -> None:
        # Lazy: its unpinned pages stay in the pool as readable copies (coordinator `free`).
        self.unpinned.pop(req.rid, None)
        full = self.full_blocks(req)
        self.host.store(req.conv, full)
        self.host.pinned.discard(req.conv)
        self._store_indexer(req)

    def start_load(self, now: float, hit: Hit) -> float:
        return submit_load(self, self.h2d, now, hit)

    def gauges(self) -> dict[str, float]:
        cap = self.host.capacity
        return {mn.HISPARSE_HOST_CACHE_USAGE_PERC: self.host.used / cap if cap else 0.0}
