"""Block accounting in plain ints: the GPU pool with its prefix cache, and host-side LRU pools.

Prefix caching is per conversation: a conversation's turns re-send its history, so the blocks
worth keeping for it are always a prefix of its token sequence, and one count per conversation
says how many of its blocks are cached and hittable (blocks a hit left behind stay cached in
their place, hittable by no one, until evicted). Blocks are never shared between conversations
(the padded datasets make every conversation's first block unique).

The two kinds of pool evict differently, as vLLM does:
* GPU (`GpuPool`): a finished request's blocks join the free queue tail-first, so eviction takes
  a conversation's last blocks first and the rest of its prefix stays usable.
* host LRU (`PrefixLru`, the CPU offload pool and the HiSparse host pool): the least recently
  used conversation loses blocks first, and it too loses them from the tail, so what remains of
  its prefix is still a hit (vLLM 0.32.0 ranks a request's offloaded chunks tail to head, and
  frees host pages tail first; see `PrefixLru`).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass
class _Cached:
    blocks: int
    units_per_block: int
    conv: int | None = None  # the conversation that can hit this run; None: no longer hittable


class GpuPool:
    """`capacity` units; a block costs `units_per_block` units (1 for vLLM's own KV blocks)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"GPU pool of {capacity} units: must be >= 1")
        self.capacity = capacity
        self.free = capacity  # units neither in use nor holding a cached block
        # Cached runs of blocks in the free queue, LRU first, keyed by a serial number; `live`
        # maps a conversation to its hittable run. A run a request took only part of stays
        # where it is, no longer hittable (see take_cached).
        self.cached: OrderedDict[int, _Cached] = OrderedDict()
        self.live: dict[int, int] = {}  # conv -> key of its run in `cached`
        self._serial = 0
        self.cached_units = 0
        self.evicted_blocks = 0
        # HiSparse unpinned pages (vLLM 0.32.0 `BlockPool.unpin_blocks`, v1/core/block_pool.py):
        # clean pages whose host copy is complete, released to the pool but still readable by
        # their conversation until an allocation reuses them; last-resort candidates, taken
        # after the free and the prefix-cached units, least recently touched conversation
        # first and, within one, tail first ("a prefix loses its tail pages before its head").
        self.copies: OrderedDict[int, _Cached] = OrderedDict()
        self.copy_units = 0
        self.lost_blocks = 0  # unpinned pages reused (their owners now read them from host)

    @property
    def used(self) -> int:
        return self.capacity - self.free - self.cached_units - self.copy_units

    def available(self) -> int:
        """Units an allocation can get: free, evictable cached and unpinned."""
        return self.free + self.cached_units + self.copy_units

    def copy_blocks(self, conv: int) -> int:
        entry = self.copies.get(conv)
        return entry.blocks if entry else 0

    def unpin(self, conv: int, blocks: int, units_per_block: int) -> None:
        """A request hands `blocks` pinned pages of conv to the pool; they stay readable."""
        if blocks <= 0:
            return
        entry = self.copies.pop(conv, None) or _Cached(0, units_per_block)
        entry.blocks += blocks
        self.copies[conv] = entry  # most recently touched
        self.copy_units += blocks * units_per_block

    def touch_copies(self, conv: int) -> None:
        if conv in self.copies:
            self.copies.move_to_end(conv)

    def cached_blocks(self, conv: int) -> int:
        key = self.live.get(conv)
        return self.cached[key].blocks if key is not None else 0

    def allocate(self, units: int) -> bool:
        """Take `units`, evicting cached blocks (LRU conversation, tail first) if needed.

        Nothing is evicted when the request cannot be met (vLLM checks the free count first).
        """
        if units <= 0:
            return True
        if units > self.available():
            return False
        while self.free < units:
            if not self.cached:  # unpinned pages are the last resort
                self._reuse_copies(units - self.free)
                continue
            key, entry = next(iter(self.cached.items()))
            need = units - self.free
            take = min(entry.blocks, -(-need // entry.units_per_block))
            entry.blocks -= take
            freed = take * entry.units_per_block
            self.cached_units -= freed
            self.free += freed
            self.evicted_blocks += take
            if entry.blocks == 0:
                self._drop(key)
        self.free -= units
        return True

    def _reuse_copies(self, need: int) -> None:
        conv, entry = next(iter(self.copies.items()))
        take = min(entry.blocks, -(-need // entry.units_per_block))
        entry.blocks -= take
        freed = take * entry.units_per_block
        self.copy_units -= freed
        self.free += freed
        self.lost_blocks += take
        if entry.blocks == 0:
            del self.copies[conv]

    def take_cached(self, conv: int, blocks: int) -> int:
        """Hand `blocks` of conv's cached prefix to a request; returns the units they hold.

        The blocks beyond the hit stay cached where they are in the free queue, no longer
        hittable by this conversation: vLLM takes only the hit's blocks out of the free queue
        (`BlockPool.touch`), and the rest keep their place and are evicted in LRU order with
        every other cached block (v1/core/block_pool.py). The request re-caches its own,
        longer prefix when it finishes. (Until the evening of 2026-12-06 they went straight
        back to the free units, evicted before any other conversation's blocks; the scheduler
        trace showed the difference: docs/simulator.md §6c.)
        """
        key = self.live.pop(conv, None)
        if key is None:
            return 0
        entry = self.cached[key]
        entry.conv = None
        blocks = min(blocks, entry.blocks)
        entry.blocks -= blocks
        self.cached_units -= blocks * entry.units_per_block
        if entry.blocks == 0:
            del self.cached[key]
        return blocks * entry.units_per_block

    def _drop(self, key: int) -> None:
        entry = self.cached.pop(key)
        if entry.conv is not None:
            del self.live[entry.conv]

    def release(
        self,
        units: int,
        *,
        conv: int | None = None,
        cache_blocks: int = 0,
        units_per_block: int = 1,
    ) -> None:
        """Return `units`; `cache_blocks` of them (a prefix of conv) stay cached, MRU. A run
        of conv cached before stays where it is, no longer hittable (the new run is the longer
        or the more recent copy of the same prefix)."""
        cache_units = cache_blocks * units_per_block if conv is not None else 0
        if cache_units > units:
            raise ValueError(f"caching {cache_units} units of a release of {units}")
        self.free += units - cache_units
        if cache_units and conv is not None:  # cache_units is 0 without a conversation
            old = self.live.pop(conv, None)
            if old is not None:
                self.cached[old].conv = None
            self._serial += 1
            self.cached[self._serial] = _Cached(cache_blocks, units_per_block, conv)
            self.live[conv] = self._serial
            self.cached_units += cache_units

    def check(self) -> None:
        total = sum(e.blocks * e.units_per_block for e in self.cached.values())
        copies = sum(e.blocks * e.units_per_block for e in self.copies.values())
        if total != self.cached_units or copies != self.copy_units:
            raise AssertionError(f"pool accounting broken: cached {total}, copies {copies}")
        if any(self.cached[key].conv != conv for conv, key in self.live.items()):
            raise AssertionError("pool accounting broken: a conversation's run is not its own")
        if self.free < 0 or self.used < 0:
            raise AssertionError(
                f"pool accounting broken: free {self.free}, cached {self.cached_units} "
                f"(entries {total}), used {self.used}, capacity {self.capacity}"
            )


@dataclass
class _Stored:
    blocks: int


class PrefixLru:
    """A host pool of `capacity` blocks holding conversation prefixes: LRU across conversations,
    tail first within one, so a partly evicted conversation keeps a usable prefix.

    vLLM 0.32.0, both host pools:
    * the offloading connector's CPU pool (`v1/kv_offload/cpu/policies/lru.py` touch and
      on_request_finished) re-ranks a request's chunks in reversed head-to-tail order, so the
      head gets the newest rank and the lowest-ranked, evicted first, is the tail;
    * the HiSparse host pool is a `BlockPool` (`v1/hisparse/block_pool.py`, bound in
      `v1/core/single_type_kv_cache_manager.py` bind_host_pool) whose manager frees a request's
      pages in reverse order (the same file, free), so its tail pages are reused first.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"host pool of {capacity} blocks: must be >= 0")
        self.capacity = capacity
        self.used = 0
        self.entries: OrderedDict[int, _Stored] = OrderedDict()
        self.pinned: set[int] = set()  # conversations whose prefix a running request needs
        self.evicted_blocks = 0

    def lookup(self, conv: int) -> int:
        """Prefix blocks of conv still held; touches it."""
        entry = self.entries.get(conv)
        if entry is None:
            return 0
        self.entries.move_to_end(conv)
        return entry.blocks

    def store(self, conv: int, blocks: int) -> int:
        """Hold conv's first `blocks` blocks (MRU); returns how many new blocks were written."""
        blocks = min(blocks, self.capacity)
        entry = self.entries.get(conv)
        if entry is None:
            have = 0
            self.entries[conv] = _Stored(blocks)
        else:  # called every step per request: refresh in place
            have = entry.blocks
            self.entries.move_to_end(conv)
            entry.blocks = blocks = max(blocks, have)  # a shorter store does not shrink
        self.used += blocks - have
        self._evict_to_fit(keep=conv)
        stored = self.entries.get(conv)
        return max(0, (stored.blocks if stored else 0) - have)

    def _evict_to_fit(self, keep: int) -> None:
        if self.used <= self.capacity:
            return
        for conv in list(self.entries):
            if self.used <= self.capacity:
                return
            if conv == keep or conv in self.pinned:
                continue
            entry = self.entries[conv]
            take = min(entry.blocks, self.used - self.capacity)  # from its tail
            entry.blocks -= take
            self.used -= take
            self.evicted_blocks += take
            if entry.blocks == 0:
                del self.entries[conv]
        if self.used > self.capacity:  # only the kept/pinned entries remain: trim the newest
            entry = self.entries[keep]
            cut = min(entry.blocks, self.used - self.capacity)
            entry.blocks -= cut
            self.used -= cut
