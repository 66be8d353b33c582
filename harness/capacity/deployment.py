"""A calculator deployment: every input of the HiSparse concurrency calculator, resolved
against the model file and validated (`make_deployment`), with the memory facts derived from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from decimal import ROUND_HALF_UP, Decimal
from typing import TypedDict

from harness.capacity.model import KvDtype, KvLayout, ModelSpec, load_model
from harness.errors import ConfigError

GIB = 2**30
# GPU presets: decimal GB per GPU, as the calculator's preset buttons (docs/recipe.md §7.1).
GPU_PRESETS_GB: dict[str, float] = {"h200": 141.0, "b200": 180.0, "b300": 288.0}
# vLLM's HiSparse hot buffer indexes slots with int16 (docs/vllm.md §1.4).
MAX_HOT_ROWS = 32768
DEFAULT_INDEXER_OFFLOAD_GIB = 128.0
DEFAULT_SYSTEM_RAM_GIB = 4096.0
_KV_DTYPES: dict[str, KvDtype] = {"fp8": "fp8", "bf16": "bf16"}


def js_to_fixed(value: float, digits: int) -> float:
    """JavaScript's Number.prototype.toFixed, parsed back: round half up on the exact binary value.

    Python's round() rounds half to even, which differs from the calculator on exact ties.
    """
    quantum = Decimal(1).scaleb(-digits)
    return float(Decimal(value).quantize(quantum, rounding=ROUND_HALF_UP))


def mtp_hot_rows(spec_tokens: int, index_topk: int) -> int:
    """Hot-buffer rows vLLM sizes for MTP: (num_speculative_tokens + 2) x top-K
    (docs/vllm.md §1.4)."""
    return (spec_tokens + 2) * index_topk


# --------------------------------------------------------------------------- deployment


@dataclass(frozen=True)
class Deployment:
    """Every calculator input, resolved and validated (one per `repro capacity` invocation)."""

    model: ModelSpec
    gpu: str  # preset name, or "custom" with --hbm-gib
    gpu_bytes: float  # physical bytes per GPU (bars)
    hbm_gib: float  # GiB per GPU
    tp: int
    dp: int
    ep: bool
    kv_dtype: KvDtype
    max_seqs: int
    hot_rows: int
    spec_tokens: int | None
    host_pool_gib: (
        float | None
    )  # None: follow the minimum non-limiting pool (the calculator default)
    indexer_offload_gib: float
    system_ram_gib: float
    share_host: bool
    kv_gib_override: float | None
    gpu_memory_utilization: float
    runtime_reserve_gib: float
    baseline_block_bytes: int
    hisparse_block_bytes: int
    host_block_bytes: int
    baseline_block_tokens: int
    gpu_block_tokens: int
    host_block_tokens: int
    hot_groups: int
    retained_pages: int
    other_gpu_blocks: int
    notes: tuple[str, ...] = ()

    @property
    def gpus(self) -> int:
        return self.dp * self.tp

    @property
    def host_copies_per_dp(self) -> int:
        return 1 if self.share_host else self.tp

    @property
    def host_copies(self) -> int:
        return self.dp * self.host_copies_per_dp

    @property
    def weights_gib_per_gpu(self) -> float:
        expert_shards = self.dp * self.tp if self.ep else self.tp
        weights = self.model.weights
        return weights.shared_gib / self.tp + weights.routed_experts_gib / expert_shards

    @property
    def gpu_budget_gib(self) -> float:
        return self.hbm_gib * self.gpu_memory_utilization

    @property
    def required_gib(self) -> float:
        return self.weights_gib_per_gpu + self.runtime_reserve_gib

    @property
    def fits(self) -> bool:
        return self.required_gib <= self.gpu_budget_gib

    @property
    def kv_gib_per_gpu(self) -> float:
        """Available KV per GPU: the override, else the estimate rounded to 0.1 GiB (toFixed(1))."""
        if self.kv_gib_override is not None:
            return self.kv_gib_override
        estimate = max(
            0.0, self.gpu_budget_gib - self.weights_gib_per_gpu - self.runtime_reserve_gib
        )
        slider_max = js_to_fixed(self.hbm_gib, 2)
        return js_to_fixed(min(slider_max, estimate), 1)

    @property
    def mtp_rows(self) -> int | None:
        if self.spec_tokens is None:
            return None
        return mtp_hot_rows(self.spec_tokens, self.model.architecture.index_topk)


def _gpu_memory(gpu: str | None, hbm_gib: float | None) -> tuple[str, float, float]:
    """(name, bytes, GiB) per GPU: a preset, or --hbm-gib ("custom")."""
    if hbm_gib is not None:
        _positive("--hbm-gib", hbm_gib)
        return "custom", hbm_gib * GIB, float(hbm_gib)
    key = (gpu or "").lower()
    if key not in GPU_PRESETS_GB:
        raise ConfigError(
            f"unknown GPU {gpu!r} (choose one of {', '.join(GPU_PRESETS_GB)}, or give --hbm-gib)"
        )
    gb = GPU_PRESETS_GB[key]
    return key, gb * 1e9, gb * 1e9 / GIB


def _check_parallelism(spec: ModelSpec, tp: int, dp: int, ep: bool) -> None:
    arch, par = spec.architecture, spec.parallelism
    where = spec.source_file or spec.name
    if tp not in par.tp_sizes:
        raise ConfigError(f"--tp {tp}: {where} allows tensor parallel sizes {list(par.tp_sizes)}")
    if dp not in par.dp_sizes:
        raise ConfigError(f"--dp {dp}: {where} allows data parallel sizes {list(par.dp_sizes)}")
    if arch.num_attention_heads % tp:
        raise ConfigError(
            f"--tp {tp} does not divide num_attention_heads {arch.num_attention_heads} ({where})"
        )
    ep_size = dp * tp if ep else tp
    if arch.n_routed_experts % ep_size:
        raise ConfigError(
            f"expert shards {ep_size} ({'DP x TP' if ep else 'TP'}) do not divide "
            f"n_routed_experts {arch.n_routed_experts} ({where})"
        )


def _check_hot_rows(spec: ModelSpec, rows: int, spec_tokens: int | None) -> list[str]:
    """Validate the hot-buffer size (and MTP's); notes for legal but suspicious values."""
    topk = spec.architecture.index_topk
    _positive("--hot-rows", rows)
    if spec_tokens is not None:
        if spec_tokens < 0:
            raise ConfigError(f"--spec-tokens {spec_tokens}: must be >= 0")
        needed = mtp_hot_rows(spec_tokens, topk)
        if needed > MAX_HOT_ROWS:
            raise ConfigError(
                f"--spec-tokens {spec_tokens} needs ({spec_tokens} + 2) x {topk} = "
                f"{needed:,} hot-buffer rows; vLLM's HiSparse buffer holds at most "
                f"{MAX_HOT_ROWS:,} (int16 slot index), i.e. at most "
                f"{MAX_HOT_ROWS // topk - 2} speculative tokens"
            )
    if rows > MAX_HOT_ROWS:
        raise ConfigError(
            f"--hot-rows {rows}: vLLM's HiSparse buffer holds at most {MAX_HOT_ROWS:,}"
        )
    if rows < topk:
        return [
            f"hot rows {rows:,} < top-K {topk:,}: vLLM requires at least max_query_len x top-K rows"
        ]
    return []


def _check_memory(
    host_pool_gib: float | None,
    indexer_offload_gib: float,
    system_ram_gib: float,
    kv_gib_per_gpu: float | None,
    gpu_gib: float,
    util: float,
) -> None:
    if host_pool_gib is not None and host_pool_gib <= 0:
        raise ConfigError(
            f"--host-pool-gib {host_pool_gib}: the HiSparse host pool must be > 0 GiB"
        )
    if indexer_offload_gib < 0:
        raise ConfigError(f"--indexer-offload-gib {indexer_offload_gib}: must be >= 0 (0 = off)")
    _positive("--system-ram-gib", system_ram_gib)
    if kv_gib_per_gpu is not None and (kv_gib_per_gpu < 0 or kv_gib_per_gpu > gpu_gib):
        raise ConfigError(
            f"--kv-gib-per-gpu {kv_gib_per_gpu}: must lie in [0, {gpu_gib:.2f}] GiB "
            f"(the GPU's memory)"
        )
    if not 0 < util <= 1:
        raise ConfigError(f"gpu-memory-utilization {util}: must lie in (0, 1]")


def _pick(name: str, value: int | None, default: int, minimum: int = 1) -> int:
    chosen = default if value is None else value
    if chosen < minimum:
        raise ConfigError(f"--{name} {chosen}: must be >= {minimum}")
    return chosen


class BlockOverrides(TypedDict, total=False):
    """`repro capacity`'s advanced options: block sizes and pool shapes (None: the model's)."""

    baseline_block_bytes: int | None
    hisparse_block_bytes: int | None
    host_block_bytes: int | None
    baseline_block_tokens: int | None
    gpu_block_tokens: int | None
    host_block_tokens: int | None
    groups: int | None
    retained_pages: int | None
    other_gpu_blocks: int | None


class _Geometry(TypedDict):
    baseline_block_bytes: int
    hisparse_block_bytes: int
    host_block_bytes: int
    baseline_block_tokens: int
    gpu_block_tokens: int
    host_block_tokens: int
    hot_groups: int
    retained_pages: int
    other_gpu_blocks: int


def _block_geometry(
    spec: ModelSpec, layout: KvLayout, given: Mapping[str, int | None]
) -> _Geometry:
    """Block sizes and pool shapes: the model file's values unless overridden (``given``)."""

    def pick(key: str, default: int, minimum: int = 1) -> int:
        return _pick(key.replace("_", "-"), given[key], default, minimum)

    return _Geometry(
        baseline_block_bytes=pick("baseline_block_bytes", layout.baseline_block_bytes),
        hisparse_block_bytes=pick("hisparse_block_bytes", layout.hisparse_block_bytes),
        host_block_bytes=pick("host_block_bytes", layout.host_block_bytes),
        baseline_block_tokens=pick("baseline_block_tokens", spec.block_tokens.baseline),
        gpu_block_tokens=pick("gpu_block_tokens", spec.block_tokens.gpu),
        host_block_tokens=pick("host_block_tokens", spec.block_tokens.host),
        hot_groups=pick("groups", spec.hot_groups),
        retained_pages=pick("retained_pages", spec.retained_pages_per_group, 0),
        other_gpu_blocks=pick("other_gpu_blocks", spec.other_gpu_blocks, 0),
    )


def make_deployment(
    model: str | ModelSpec = "glm-5.3",
    *,
    gpu: str | None = "h200",
    hbm_gib: float | None = None,
    tp: int = 8,
    dp: int = 1,
    ep: bool = True,
    kv_dtype: str = "fp8",
    max_seqs: int | None = None,
    hot_rows: int | None = None,
    spec_tokens: int | None = None,
    host_pool_gib: float | None = None,
    indexer_offload_gib: float = DEFAULT_INDEXER_OFFLOAD_GIB,
    system_ram_gib: float = DEFAULT_SYSTEM_RAM_GIB,
    share_host: bool = True,
    kv_gib_per_gpu: float | None = None,
    gpu_memory_utilization: float | None = None,
    baseline_block_bytes: int | None = None,
    hisparse_block_bytes: int | None = None,
    host_block_bytes: int | None = None,
    baseline_block_tokens: int | None = None,
    gpu_block_tokens: int | None = None,
    host_block_tokens: int | None = None,
    groups: int | None = None,
    retained_pages: int | None = None,
    other_gpu_blocks: int | None = None,
    check_fit: bool = True,
) -> Deployment:
    """Validate calculator inputs against the model file; raise ConfigError naming the bad value."""
    spec = model if isinstance(model, ModelSpec) else load_model(model)
    gpu_name, gpu_bytes, gpu_gib = _gpu_memory(gpu, hbm_gib)
    _check_parallelism(spec, tp, dp, ep)
    dtype = _KV_DTYPES.get(kv_dtype)
    if dtype is None:
        raise ConfigError(f"--kv-dtype {kv_dtype!r}: choose fp8 or bf16")
    layout = spec.layout(dtype)
    rows = spec.default_hot_rows if hot_rows is None else hot_rows
    notes = _check_hot_rows(spec, rows, spec_tokens)
    util = spec.gpu_memory_utilization if gpu_memory_utilization is None else gpu_memory_utilization
    _check_memory(host_pool_gib, indexer_offload_gib, system_ram_gib, kv_gib_per_gpu, gpu_gib, util)
    seqs = _pick("max-seqs", max_seqs, spec.calculator_max_seqs)
    geometry = _block_geometry(
        spec,
        layout,
        {
            "baseline_block_bytes": baseline_block_bytes,
            "hisparse_block_bytes": hisparse_block_bytes,
            "host_block_bytes": host_block_bytes,
            "baseline_block_tokens": baseline_block_tokens,
            "gpu_block_tokens": gpu_block_tokens,
            "host_block_tokens": host_block_tokens,
            "groups": groups,
            "retained_pages": retained_pages,
            "other_gpu_blocks": other_gpu_blocks,
        },
    )
    deployment = Deployment(
        model=spec,
        gpu=gpu_name,
        gpu_bytes=gpu_bytes,
        hbm_gib=gpu_gib,
        tp=tp,
        dp=dp,
        ep=ep,
        kv_dtype=dtype,
        max_seqs=seqs,
        hot_rows=rows,
        spec_tokens=spec_tokens,
        host_pool_gib=host_pool_gib,
        indexer_offload_gib=float(indexer_offload_gib),
        system_ram_gib=float(system_ram_gib),
        share_host=share_host,
        kv_gib_override=kv_gib_per_gpu,
        gpu_memory_utilization=util,
        runtime_reserve_gib=spec.runtime_reserve_gib,
        **geometry,
    )
    if check_fit and not deployment.fits:
        message = (
            f"{spec.display_name} does not fit: weights "
            f"{deployment.weights_gib_per_gpu:.1f} GiB/GPU "
            f"+ runtime reserve {deployment.runtime_reserve_gib:g} GiB = "
            f"{deployment.required_gib:.1f} GiB, but the {util:.0%} budget of "
            f"{gpu_name.upper()} ({gpu_gib:.2f} GiB) is {deployment.gpu_budget_gib:.1f} GiB. "
            f"Increase TP, enable EP with DP > 1, or choose a larger GPU"
        )
        if kv_gib_per_gpu is None:
            raise ConfigError(message)
        notes.append(message + " (continuing: --kv-gib-per-gpu was given)")
    return replace(deployment, notes=tuple(notes))


def _positive(name: str, value: float) -> None:
    if value <= 0:
        raise ConfigError(f"{name} {value}: must be > 0")
