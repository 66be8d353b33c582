"""The HiSparse GPU pool as vLLM 0.32.0 lays it out (docs/simulator.md §3, "HiSparse's pool").

vLLM does not size HiSparse pages the way the capacity calculator does. Its hybrid allocator
gives every HiSparse GPU group (the indexer group, one resident and one hot group per
index-share unit) pages from one pool of equal blocks, each as large as the largest group's
page rounded up to the hot groups' page (vLLM 0.32.0 `v1/core/kv_cache_utils.py`
_get_kv_cache_bytes_per_block; the groups: `v1/hisparse/layout.py` _lay_out_hisparse_groups).
For GLM-5.3 the largest page is the indexer's (132 B x 64 tokens x every indexer layer, the MTP
layer's included), rounded up to a multiple of one 64-token fp8_ds_mla page (656 B x 64): a
209,920 B block, of which a resident group of four MLA layers uses 167,936 B. The per-index-group
runtime buffers are allocated while the model loads, so the start-up profile counts them with
the weights and they come off the KV pool (`v1/hisparse/runtime.py` HiSparseRuntime).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.capacity.model import ModelSpec
from harness.sim.cost import SERVED_ROW_BYTES

ACTIVE_TAIL_PAGES = 2  # vLLM 0.32.0 v1/hisparse/types.py: pages per group a request keeps pinned
TOPK_INDEX_BYTES = 4  # int32 row indices
LRU_SLOT_BYTES = 2  # int16 slot ages
SHARED_TOPK_TENSORS = 4  # _SharedTopKState: topk rows, physical indices, host and device swaps


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class HiSparseLayout:
    """Per GPU, in pool blocks of `block_bytes` (one block is one page of any HiSparse group)."""

    block_bytes: int
    groups: int  # resident groups = hot groups: one per index-share unit
    hot_rows: int  # (max decode query length + 1) x top-K
    runtime_bytes: int  # per-index-group buffers, taken off the pool at start-up

    @property
    def resident_blocks_per_block(self) -> int:
        """Pool blocks a fully GPU-resident 64-token block holds: one page per resident
        group, plus its indexer page (counted separately, `indexer_blocks_per_block`)."""
        return self.groups

    @property
    def indexer_blocks_per_block(self) -> int:
        return 1

    def hot_blocks(self, block_tokens: int) -> int:
        """A host-reading request's hot region: cdiv(hot rows, block) pages in every hot group
        (`v1/hisparse/layout.py`: hot_blocks_per_request)."""
        return self.groups * _cdiv(self.hot_rows, block_tokens)

    @property
    def tail_blocks(self) -> int:
        return self.groups * ACTIVE_TAIL_PAGES

    def pool_blocks(self, free_kv_bytes: float) -> int:
        """Blocks vLLM allocates from what its profile left (the runtime buffers were counted
        with the weights), less block 0, the null block (`v1/core/block_pool.py`)."""
        return max(0, int((free_kv_bytes - self.runtime_bytes) // self.block_bytes) - 1)

    def residency_args(self, block_tokens: int) -> dict[str, int]:
        """The HiSparse residency's sizes in pool blocks (`harness.sim.residency`)."""
        return {
            "latent_units": self.resident_blocks_per_block,
            "indexer_units": self.indexer_blocks_per_block,
            "lease_units": self.hot_blocks(block_tokens) + self.tail_blocks,
        }


def vllm_hisparse_layout(
    model: ModelSpec,
    *,
    dtype: str,
    spec_tokens: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
) -> HiSparseLayout:
    """GLM-5.3-style sparse MLA with a shared indexer: the layout vLLM 0.32.0 builds.

    One resident and one hot group per index-share unit (`indexer_full_layers` units; a unit of
    four MLA layers is the largest that fits one indexer page, so no two units share a group).
    The MTP layer is one more sparse-MLA layer with its own indexer (it joins the last unit).
    """
    arch = model.architecture
    block = model.block_tokens.gpu
    layout = model.layout(dtype)  # type: ignore[arg-type]  # the caller checked kv_layouts
    indexer_layers = arch.indexer_full_layers + (1 if spec_tokens else 0)
    indexer_page = (layout.indexer_bytes_per_token_layer or 0) * block * indexer_layers
    latent_page = SERVED_ROW_BYTES * block  # one layer's fp8_ds_mla page
    block_bytes = _cdiv(indexer_page, latent_page) * latent_page
    per_unit = _cdiv(arch.num_layers, arch.indexer_full_layers)
    if per_unit * latent_page > block_bytes:
        raise ValueError(
            f"{model.source_file}: an index-share unit of {per_unit} layers does not fit one "
            "HiSparse block; this layout is not modelled"
        )
    query_len = 1 + spec_tokens  # max_decode_query_len
    hot_rows = (query_len + 1) * arch.index_topk  # ResolvedHiSparseConfig.device_buffer_size
    swap_rows = min(max_num_batched_tokens, max_num_seqs * query_len)  # _get_max_swap_rows
    per_group = (
        max_num_seqs * hot_rows * (TOPK_INDEX_BYTES + LRU_SLOT_BYTES)
        + SHARED_TOPK_TENSORS * swap_rows * arch.index_topk * TOPK_INDEX_BYTES
    )
    return HiSparseLayout(
        block_bytes, arch.indexer_full_layers, hot_rows, per_group * indexer_layers
    )


def served_hisparse_pool(
    model: ModelSpec,
    dep: Any,
    policy_args: dict[str, Any],
    pool: int | None,
    runtime_gib: float | None,
    spec_tokens: int,
    cf: Any,
    max_num_seqs: int,
    max_num_batched_tokens: int,
) -> tuple[int, int, dict[str, float]]:
    """A HiSparse pool laid out as vLLM 0.32.0 lays it out: (pool blocks, block bytes, facts),
    with `policy_args` set to the layout's residency sizes. The pool: `pool` when given (an
    override, in vLLM blocks), else what the start-up profile leaves when it takes
    `runtime_gib` besides the weights (docs/simulator.md §3), else the budget the run was
    given (`dep.kv_gib_per_gpu`)."""
    from harness.capacity.deployment import GIB
    from harness.sim.pool import profile_free_kv_gib

    lay = vllm_hisparse_layout(
        model,
        dtype=dep.kv_dtype,
        spec_tokens=spec_tokens,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
    )
    free = dep.kv_gib_per_gpu
    if runtime_gib is not None:
        free = profile_free_kv_gib(model, dep, spec_tokens, cf, runtime_gib)
    policy_args.update(lay.residency_args(model.block_tokens.gpu))
    facts = {
        "hisparse_block_bytes": lay.block_bytes,
        "hisparse_groups": lay.groups,
        "hisparse_runtime_gib": lay.runtime_bytes / GIB,
        "free_kv_gib": free,
    }
    blocks = lay.pool_blocks(free * GIB) if pool is None else pool
    return blocks, lay.block_bytes, facts
