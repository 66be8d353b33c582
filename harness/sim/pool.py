"""The KV pool and block bytes as the served engine has them, from the capacity model (the
calculator's geometry) and the compute facts: per GPU, per MTP mode (docs/simulator.md §3)."""

from __future__ import annotations

import math
from typing import Any

from harness.capacity.deployment import GIB, make_deployment
from harness.capacity.formulas import capacity_at
from harness.capacity.model import ModelSpec
from harness.errors import ConfigError
from harness.sim.cost import SERVED_ROW_BYTES

__all__ = [
    "derived_kv_gib",
    "free_kv_gib",
    "kv_budget",
    "mtp_kv_gib",
    "profile_free_kv_gib",
    "residency_pools",
    "served_bytes_scale",
    "served_plain_pool",
    "served_token_bytes",
    "token_bytes",
]


def mtp_kv_gib(model: ModelSpec, dtype: str, kv_gib: float, spec: int, cf: Any, tp: int) -> float:
    """The KV budget per GPU in the capacity model's block bytes, per MTP mode.

    vLLM sizes the pool after loading the weights, the MTP module's among them (FP8, 1 B per
    parameter, a 1/TP share per rank), and gives the MTP layer its own latent and indexer KV in
    every block (one more sparse-MLA layer). `kv_gib` is the MTP server's budget (what a
    calibration fits, and what its start-up log states): without MTP the module's weights are
    free memory; with it, every block is one layer wider than the calculator's, so the same bytes
    hold fewer calculator blocks.
    """
    if not spec:
        return kv_gib + cf.mtp_params / tp / GIB
    return kv_gib * _mtp_block_ratio(model, dtype)


def _mtp_block_ratio(model: ModelSpec, dtype: str) -> float:
    """Calculator bytes per token / the same with the MTP layer's latent and indexer rows."""
    latent, indexer = token_bytes(model, dtype)
    arch = model.architecture
    per_token = arch.num_layers * latent + arch.indexer_full_layers * indexer
    return per_token / (per_token + latent + indexer)


def token_bytes(model: ModelSpec, dtype: str) -> tuple[int, int]:
    """Latent and indexer bytes per token and layer of a KV layout (the capacity model's)."""
    layout = model.layout(dtype)  # type: ignore[arg-type]  # dtype was checked against kv_layouts
    latent, indexer = layout.latent_bytes_per_token_layer, layout.indexer_bytes_per_token_layer
    if latent is None or indexer is None:
        raise ConfigError(
            f"{model.source_file}: kv_layouts.{dtype}: latent_bytes_per_token_layer and "
            "indexer_bytes_per_token_layer are required by the simulator"
        )
    return latent, indexer


def derived_kv_gib(dep: Any, runtime_gib: float, spec: int, cf: Any) -> float:
    """The KV pool per GPU as vLLM sizes it at start-up, in the capacity model's block bytes.

    vLLM (`v1/worker/gpu_worker.py` determine_available_memory) gives the KV cache what is left
    of gpu-memory-utilization x HBM after the weights and the profile run's peak: the weights
    (the capacity model's shared / TP + routed / expert shards), the MTP module's weights when
    speculative decoding is on (FP8, a 1/TP share per rank), and `runtime_gib` (peak
    activations of a max_num_batched_tokens forward, CUDA graphs, NCCL/cuBLAS buffers). The
    indexer cache shares every block with the latent (the calculator's baseline block holds
    both); with MTP every block also carries the MTP layer's latent and indexer rows
    (mtp_kv_gib's ratio), so the same bytes hold fewer calculator blocks. The null block is
    taken off the pool by the caller (docs/simulator.md §3).
    """
    free = free_kv_gib(dep, runtime_gib, spec, cf)
    return free * _mtp_block_ratio(dep.model, dep.kv_dtype) if spec else free


def free_kv_gib(dep: Any, runtime_gib: float, spec: int, cf: Any) -> float:
    """What vLLM's start-up profile leaves for KV per GPU, in GiB: gpu-memory-utilization
    x HBM - the weights - the MTP module's weights (with MTP) - `runtime_gib`."""
    free = dep.gpu_budget_gib - dep.weights_gib_per_gpu - runtime_gib
    if spec:
        free -= cf.mtp_params / dep.tp / GIB
    return max(0.0, free)


def served_token_bytes(model: ModelSpec, dtype: str, spec: int) -> int | None:
    """KV bytes per token and GPU as the server lays them out, every layer's rows together
    (None: the layout has no served row size, and the calculator's bytes stand).

    The served latent row is the fp8_ds_mla row (SERVED_ROW_BYTES: 512 B latent, 16 B scales,
    128 B BF16 RoPE) where the calculator counts 576 B; with MTP the MTP layer adds one latent
    and one indexer row per token (docs/simulator.md §3). vLLM keeps every layer of a block
    in one group of per-layer pages, so a block holds exactly these rows x its tokens, and an
    offloaded block is a byte copy of it (v1/core/kv_cache_utils.py
    get_kv_cache_config_from_groups; the offloading connector's worker_kv_bytes_per_block)."""
    if dtype != "fp8":
        return None
    _, indexer = token_bytes(model, dtype)
    arch = model.architecture
    extra = 1 if spec else 0
    return (arch.num_layers + extra) * SERVED_ROW_BYTES + (
        arch.indexer_full_layers + extra
    ) * indexer


def served_bytes_scale(model: ModelSpec, dtype: str, spec: int) -> float:
    """Bytes per token of an offloaded block as the server holds it / the calculator's
    (`served_token_bytes`; 1.0 for layouts without a served row size)."""
    served = served_token_bytes(model, dtype, spec)
    if served is None:
        return 1.0
    latent, indexer = token_bytes(model, dtype)
    arch = model.architecture
    return served / (arch.num_layers * latent + arch.indexer_full_layers * indexer)


def served_plain_pool(
    model: ModelSpec,
    dep: Any,
    spec: int,
    cf: Any,
    runtime_gib: float | None,
    given: int | None,
    calculator_pool: int,
) -> tuple[int, int | None]:
    """(GPU blocks, bytes per block) of a plain or offloading server with vLLM's layout.

    A block holds `served_token_bytes` x its tokens. `given`: the profile's block count
    (num-gpu-blocks-override). With `runtime_gib` the pool is what vLLM's start-up profile
    leaves (`profile_free_kv_gib`) over that block, less the null block. Otherwise (an explicit
    or the calculator's budget), or with no served row size, `calculator_pool` stands."""
    served = served_token_bytes(model, dep.kv_dtype, spec)
    if served is None:
        return calculator_pool, None
    unit = served * dep.baseline_block_tokens
    if given is not None:
        return given, unit
    if runtime_gib is None:
        return calculator_pool, None
    free = profile_free_kv_gib(model, dep, spec, cf, runtime_gib)
    return math.floor(free * GIB / unit) - 1, unit  # block 0 is vLLM's null block


def connector_pages_per_block(model: ModelSpec, policy: str, spec: int) -> int:
    """Copy descriptors the offloading connector submits per block moved: one per layer page
    (vLLM 0.32.0 `v1/kv_offload/cpu/gpu_worker.py` fills one per block and layer tensor, and
    adjacent pages are never merged). It carries every KV layer in the offloading arm, only the
    indexer's beside HiSparse (which mirrors the latent itself); with MTP the MTP layer adds
    one of each."""
    arch = model.architecture
    extra = 1 if spec else 0
    indexer = arch.indexer_full_layers + extra
    if policy == "hisparse":
        return indexer
    return arch.num_layers + extra + indexer


def residency_pools(
    dep: Any, rows: int, host_gib: float | None, cpu_bytes: int | None
) -> tuple[str, int, dict[str, Any]]:
    """The KV arm (gpu, offload, hisparse), its GPU pool units and residency sizes (capacity model)."""
    model, tp = dep.model, dep.tp
    lim = capacity_at(dep, model.block_tokens.baseline, rows)
    layout = model.layout(dep.kv_dtype)
    if host_gib is not None:
        indexer_block = (
            layout.indexer_bytes_per_token_layer
            * model.architecture.indexer_full_layers
            * model.block_tokens.gpu
        )
        return (
            "hisparse",
            lim.gpu_pool,
            {
                "latent_units": math.ceil(dep.host_block_bytes / dep.hisparse_block_bytes),
                "indexer_units": model.indexer_pages_per_block,
                "lease_units": lim.hot_per_request + lim.resident_per_request,
                "host_blocks": math.floor(host_gib * GIB / dep.host_block_bytes),
                "indexer_cpu_blocks": (cpu_bytes or 0) // tp // indexer_block,
                "indexer_block_bytes": indexer_block,
            },
        )
    if cpu_bytes is not None:
        return (
            "offload",
            lim.baseline_pool,
            {
                "cpu_blocks": cpu_bytes // tp // dep.baseline_block_bytes,
                "block_bytes": dep.baseline_block_bytes,
            },
        )
    return "gpu", lim.baseline_pool, {}


def kv_budget(
    model: ModelSpec,
    gpu: str,
    tp: int,
    dtype: str,
    util: float,
    spec: int,
    cf: Any,
    kv_override: float | None,
    runtime_gib: float | None,
) -> float | None:
    """KV GiB per GPU: None uncalibrated (the calculator's budget for both MTP modes, as
    `repro capacity` gives it); an explicit budget is the MTP server's, taken per MTP mode
    (mtp_kv_gib); a calibrated run derives the pool as vLLM sizes it, per GPU and mode."""
    if kv_override is not None:
        return mtp_kv_gib(model, dtype, kv_override, spec, cf, tp)
    if runtime_gib is None:
        return None
    return derived_kv_gib(_plain(model, gpu, tp, dtype, util), runtime_gib, spec, cf)


def profile_free_kv_gib(
    model: ModelSpec, dep: Any, spec: int, cf: Any, runtime_gib: float
) -> float:
    """`free_kv_gib` for the GPU, TP, KV dtype and memory utilisation of deployment `dep`."""
    plain = _plain(model, dep.gpu, dep.tp, dep.kv_dtype, dep.gpu_memory_utilization)
    return free_kv_gib(plain, runtime_gib, spec, cf)


def _plain(model: ModelSpec, gpu: str, tp: int, dtype: str, util: float) -> Any:
    """The deployment vLLM's start-up profile sees: the model's weights on these GPUs."""
    return make_deployment(model, gpu=gpu, tp=tp, kv_dtype=dtype, gpu_memory_utilization=util)
