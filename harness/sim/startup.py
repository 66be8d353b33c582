"""The simulated engine's start-up refusals, with vLLM 0.32.0's condition and wording.

vLLM refuses to start when its GPU KV pool cannot hold one request of `max_model_len`
(`vllm/v1/core/kv_cache_utils.py`, `_check_enough_kv_cache_memory`): the KV bytes one such
request needs are compared with the available KV memory minus the null block the block pool
holds back, and the error states the largest length that would fit (a binary search over the
same need). HiSparse keeps a request's latent KV on the host, so only its GPU-resident part
counts (vLLM leaves the host-resident source group out of the need): the indexer pages of the
whole context plus the hot buffers and retained tail pages. The simulated engine sizes that from
the capacity model (the blog's calculator: ceil(L/64) + 20 x ceil(buf/64) + 40 pages), the
same pages its HiSparse residency admits a request with. Upstream 0.32.0 also reserves a resident
admission window of 20 x ceil(min(in-flight tokens, L)/64) pages; at 1M with 32,768 batched
tokens that adds 10,240 pages (19,624 -> 29,864 of 103,692): the verdict is the same.

A HiSparse host pool smaller than one request's blocks plus two is refused too
(`vllm/v1/hisparse/layout.py`, `create_hisparse_layout`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.capacity.deployment import GIB, Deployment
from harness.errors import ServerError

DOCS = "https://docs.vllm.ai/en/latest/configuration/conserving_memory/"


class EngineRefused(ServerError):
    """The engine would not start (vLLM raises ValueError and the server exits 1).

    `reason` is vLLM's message alone; `where` (the profile) only prefixes the text shown."""

    exit_code = 1

    def __init__(self, reason: str, where: str = "") -> None:
        super().__init__(f"{where}: engine start refused: {reason}" if where else reason)
        self.reason = reason
        self.where = where


def format_gib(nbytes: float) -> str:
    """vLLM's `format_gib`: GiB rounded to two decimals, Python's float repr."""
    return f"{round(nbytes / GIB, 2)}"


@dataclass(frozen=True)
class KvPool:
    """What the check compares: the pool's bytes and the units one request of a length needs."""

    available_bytes: int  # KV memory per GPU (num-gpu-blocks-override x unit bytes if set)
    unit_bytes: int  # one pool unit: a baseline block, or a HiSparse GPU page
    need_units: Callable[[int], int]  # GPU units one request of that many tokens needs


def kv_pool(
    policy: str,
    pool_units: int,
    dep: Deployment,
    args: dict[str, Any],
    overridden: bool,
    window_blocks: int | None = None,
    unit_bytes: int | None = None,
) -> KvPool:
    """The simulated pool and per-request need, in the units the residency allocates.

    `unit_bytes`: the block of a pool laid out as vLLM 0.32.0 lays out HiSparse's (all of it
    usable). `window_blocks`: HiSparse's resident admission window under the vLLM 0.32
    residency. One request then needs the window's resident pages at admission, and later its
    indexer pages plus a hot region; a pool smaller than either can never run it, so the engine
    refuses to start instead of waiting forever."""
    if policy == "hisparse":
        unit, tokens = dep.hisparse_block_bytes, dep.gpu_block_tokens
        resident = args["latent_units"] + args["indexer_units"]

        def need(n: int) -> int:  # as HiSparse.admission_units with no prefix hit
            blocks = -(-n // tokens)
            host_resident = blocks * args["indexer_units"] + args["lease_units"]
            if window_blocks is not None:
                return max(min(blocks, window_blocks) * resident, host_resident)
            return min(blocks * resident, host_resident)

    else:
        unit, tokens = dep.baseline_block_bytes, dep.baseline_block_tokens

        def need(n: int) -> int:  # fully resident: every block of the context
            return -(-n // tokens)

    if unit_bytes is not None:  # vLLM 0.32.0's HiSparse blocks (harness/sim/hisparse_layout.py)
        return KvPool(pool_units * unit_bytes, unit_bytes, need)
    available = pool_units * unit if overridden else int(dep.kv_gib_per_gpu * GIB)
    return KvPool(available, unit, need)


ASYNC_CONCURRENT_BATCHES = 2


def admission_window_blocks(
    policy: str, residency: str, batched_tokens: int, max_len: int, block_tokens: int
) -> int | None:
    """HiSparse under the vLLM 0.32 residency: the resident pages admission reserves for a
    request, its in-flight window in GPU blocks (cdiv(min(2 x batched tokens, max len), block));
    None where admission has no window."""
    if policy != "hisparse" or residency != "vllm-0.32":
        return None
    # vLLM 0.32.0 max_in_flight_tokens (config/vllm.py): max_concurrent_batches x batched tokens,
    # 2 with async scheduling, which is on by default and with MTP, under model runner V2
    # (HiSparse forces it); `v1/kv_cache_interface.py` max_admission_blocks_per_request.
    in_flight = ASYNC_CONCURRENT_BATCHES * batched_tokens
    return -(-min(in_flight, max_len) // block_tokens)


def estimate_max_model_len(pool: KvPool, check_bytes: int, max_model_len: int) -> int:
    """The largest length in [1, max_model_len] whose need fits, or 0 (vLLM's binary search)."""

    def fits(n: int) -> bool:
        return pool.need_units(n) * pool.unit_bytes <= check_bytes

    if not fits(1):
        return 0
    low, high, best = 1, max_model_len, 1
    while low <= high:
        mid = (low + high) // 2
        if fits(mid):
            best, low = mid, mid + 1
        else:
            high = mid - 1
    return best


def check_kv_pool(pool: KvPool, max_model_len: int) -> dict[str, float]:
    """Raise EngineRefused, worded as vLLM's ValueError, if one max-length request cannot fit;
    else the check's numbers (GiB) for the run's facts."""
    check_bytes = pool.available_bytes - pool.unit_bytes  # the null block is held back
    if check_bytes <= 0:
        raise EngineRefused(
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
            "when initializing the engine (this flag also controls CPU memory reservation on "
            f"the CPU backend, despite its name). See {DOCS} for more details."
        )
    needed = pool.need_units(max_model_len) * pool.unit_bytes
    if needed <= check_bytes:
        return {
            "max_model_len_kv_gib": round(needed / GIB, 4),
            "available_kv_gib": round(check_bytes / GIB, 4),
        }
    estimated = estimate_max_model_len(pool, check_bytes, max_model_len)
    estimated_msg = (
        f"Based on the available memory, the estimated maximum model length is {estimated}. "
        if estimated > 0
        else ""
    )
    raise EngineRefused(
        f"To serve at least one request with the model's max seq len ({max_model_len}), "
        f"({format_gib(needed)} GiB KV cache is needed, which is larger than the available KV "
        f"cache memory ({format_gib(check_bytes)} GiB). {estimated_msg}"
        "Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU "
        "backend) or decreasing `max_model_len` when initializing the engine. "
        f"See {DOCS} for more details."
    )


def check_host_pool(host_blocks: int, block_tokens: int, max_model_len: int) -> None:
    """HiSparse: every computed page needs a host block; one max-length request must fit."""
    if host_blocks <= 0:
        raise EngineRefused("HiSparse has no allocatable host blocks.")
    needed = -(-max_model_len // block_tokens) + 2
    if host_blocks < needed:
        raise EngineRefused(
            f"HiSparse host pool has {host_blocks} blocks but max_model_len needs {needed}; "
            "increase host_pool_gib."
        )
