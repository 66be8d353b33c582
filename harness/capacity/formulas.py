"""The blog's HiSparse concurrency calculator, as pure functions (recipe.md section 7).

Exactness matters more than elegance here: every floor, ceil and rounding step mirrors the
calculator (`hisparse_concurrency_calculator.html` @ 21fd986c) so that `repro capacity` shows the
numbers the blog's page shows. Two extensions, both off the calculator's path unless asked for:

* MTP: with `spec_tokens`, a second figure sizes the hot buffers by the post's rule,
  rows = (spec_tokens + 2) x top-K (vLLM's `device_buffer_size` default).
* `indexer_pages_per_block` in the model file (1 for GLM-5.3, as the calculator assumes), so that
  models with more indexer layers than one GPU page holds can plug in.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from harness.capacity.model import KvDtype, ModelSpec, load_model
from harness.errors import ConfigError

GIB = 2**30
# GPU presets: decimal GB per GPU, as the calculator's preset buttons (recipe.md 7.1).
GPU_PRESETS_GB: dict[str, float] = {"h200": 141.0, "b200": 180.0, "b300": 288.0}
# The calculator's host slider range; the host pool follows the minimum, clamped to it (7.3).
HOST_SLIDER_GIB = (16.0, 4096.0)
# vLLM's HiSparse hot buffer indexes slots with int16 (vllm.md 1.4).
MAX_HOT_ROWS = 32768
DEFAULT_SEQ_LEN = 81920  # the calculator's default sequence length
DEFAULT_INDEXER_OFFLOAD_GIB = 128.0
DEFAULT_SYSTEM_RAM_GIB = 4096.0


def js_to_fixed(value: float, digits: int) -> float:
    """JavaScript's Number.prototype.toFixed, parsed back: round half up on the exact binary value.

    Python's round() rounds half to even, which differs from the calculator on exact ties.
    """
    quantum = Decimal(1).scaleb(-digits)
    return float(Decimal(value).quantize(quantum, rounding=ROUND_HALF_UP))


def mtp_hot_rows(spec_tokens: int, index_topk: int) -> int:
    """Hot-buffer rows vLLM sizes for MTP: (num_speculative_tokens + 2) x top-K (vllm.md 1.4)."""
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
    notes: list[str] = []
    if hbm_gib is not None:
        _positive("--hbm-gib", hbm_gib)
        gpu_name, gpu_bytes, gpu_gib = "custom", hbm_gib * GIB, float(hbm_gib)
    else:
        key = (gpu or "").lower()
        if key not in GPU_PRESETS_GB:
            raise ConfigError(
                f"unknown GPU {gpu!r} (choose one of {', '.join(GPU_PRESETS_GB)}, or give --hbm-gib)"
            )
        gb = GPU_PRESETS_GB[key]
        gpu_name, gpu_bytes, gpu_gib = key, gb * 1e9, gb * 1e9 / GIB

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
    if kv_dtype not in ("fp8", "bf16"):
        raise ConfigError(f"--kv-dtype {kv_dtype!r}: choose fp8 or bf16")
    layout = spec.layout(kv_dtype)  # type: ignore[arg-type]

    rows = spec.default_hot_rows if hot_rows is None else hot_rows
    _positive("--hot-rows", rows)
    if spec_tokens is not None:
        if spec_tokens < 0:
            raise ConfigError(f"--spec-tokens {spec_tokens}: must be >= 0")
        needed = mtp_hot_rows(spec_tokens, arch.index_topk)
        if needed > MAX_HOT_ROWS:
            raise ConfigError(
                f"--spec-tokens {spec_tokens} needs ({spec_tokens} + 2) x {arch.index_topk} = "
                f"{needed:,} hot-buffer rows; vLLM's HiSparse buffer holds at most "
                f"{MAX_HOT_ROWS:,} (int16 slot index), i.e. at most "
                f"{MAX_HOT_ROWS // arch.index_topk - 2} speculative tokens"
            )
    if rows > MAX_HOT_ROWS:
        raise ConfigError(
            f"--hot-rows {rows}: vLLM's HiSparse buffer holds at most {MAX_HOT_ROWS:,}"
        )
    if rows < arch.index_topk:
        notes.append(
            f"hot rows {rows:,} < top-K {arch.index_topk:,}: vLLM requires at least "
            f"max_query_len x top-K rows"
        )

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
    util = spec.gpu_memory_utilization if gpu_memory_utilization is None else gpu_memory_utilization
    if not 0 < util <= 1:
        raise ConfigError(f"gpu-memory-utilization {util}: must lie in (0, 1]")

    def pick(name: str, value: int | None, default: int, minimum: int = 1) -> int:
        chosen = default if value is None else value
        if chosen < minimum:
            raise ConfigError(f"--{name} {chosen}: must be >= {minimum}")
        return chosen

    deployment = Deployment(
        model=spec,
        gpu=gpu_name,
        gpu_bytes=gpu_bytes,
        hbm_gib=gpu_gib,
        tp=tp,
        dp=dp,
        ep=ep,
        kv_dtype=kv_dtype,  # type: ignore[arg-type]
        max_seqs=pick("max-seqs", max_seqs, spec.calculator_max_seqs),
        hot_rows=rows,
        spec_tokens=spec_tokens,
        host_pool_gib=host_pool_gib,
        indexer_offload_gib=float(indexer_offload_gib),
        system_ram_gib=float(system_ram_gib),
        share_host=share_host,
        kv_gib_override=kv_gib_per_gpu,
        gpu_memory_utilization=util,
        runtime_reserve_gib=spec.runtime_reserve_gib,
        baseline_block_bytes=pick(
            "baseline-block-bytes", baseline_block_bytes, layout.baseline_block_bytes
        ),
        hisparse_block_bytes=pick(
            "hisparse-block-bytes", hisparse_block_bytes, layout.hisparse_block_bytes
        ),
        host_block_bytes=pick("host-block-bytes", host_block_bytes, layout.host_block_bytes),
        baseline_block_tokens=pick(
            "baseline-block-tokens", baseline_block_tokens, spec.block_tokens.baseline
        ),
        gpu_block_tokens=pick("gpu-block-tokens", gpu_block_tokens, spec.block_tokens.gpu),
        host_block_tokens=pick("host-block-tokens", host_block_tokens, spec.block_tokens.host),
        hot_groups=pick("groups", groups, spec.hot_groups),
        retained_pages=pick("retained-pages", retained_pages, spec.retained_pages_per_group, 0),
        other_gpu_blocks=pick("other-gpu-blocks", other_gpu_blocks, spec.other_gpu_blocks, 0),
    )
    if check_fit and not deployment.fits:
        message = (
            f"{spec.display_name} does not fit: weights {deployment.weights_gib_per_gpu:.1f} GiB/GPU "
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


# --------------------------------------------------------------------------- one sequence length


@dataclass(frozen=True)
class Limits:
    """The calculator's capacityAtSequence, per DP rank (block counts are per GPU: KV is replicated)."""

    baseline_pool: int
    baseline_per_request: int
    baseline_limit: int
    gpu_pool: int
    indexer_per_request: int
    hot_per_request: int
    resident_per_request: int
    hisparse_gpu_per_request: int
    offloaded_gpu_limit: int
    host_per_request: int
    host_pool: float  # inf when the host pool is not limiting
    host_limit: float
    hisparse_gpu_limit: int
    hisparse_limit: int
    non_limiting_host_bytes: int


def capacity_at(dep: Deployment, seq_len: int, hot_rows: int, host_gib: float = math.inf) -> Limits:
    if seq_len < 1:
        raise ConfigError(f"--seq-len {seq_len}: must be >= 1")
    kv_bytes = dep.kv_gib_per_gpu * GIB
    baseline_pool = math.floor(kv_bytes / dep.baseline_block_bytes)
    baseline_per_request = math.ceil(seq_len / dep.baseline_block_tokens)
    baseline_limit = min(dep.max_seqs, max(0, baseline_pool // baseline_per_request))

    gpu_pool = math.floor(kv_bytes / dep.hisparse_block_bytes)
    indexer = math.ceil(seq_len / dep.gpu_block_tokens) * dep.model.indexer_pages_per_block
    hot = dep.hot_groups * math.ceil(hot_rows / dep.gpu_block_tokens)
    resident = dep.hot_groups * dep.retained_pages
    per_request = indexer + hot + resident + dep.other_gpu_blocks
    offloaded_gpu_limit = max(0, gpu_pool // per_request)

    host_per_request = math.ceil(seq_len / dep.host_block_tokens)
    if math.isinf(host_gib):
        host_pool: float = math.inf
        host_limit: float = math.inf
    else:
        host_pool = math.floor(host_gib * GIB / dep.host_block_bytes)
        host_limit = max(0, int(host_pool) // host_per_request)
    offloaded_limit = min(dep.max_seqs, offloaded_gpu_limit, host_limit)
    non_limiting = min(dep.max_seqs, offloaded_gpu_limit)
    host_bytes = (
        non_limiting * host_per_request * dep.host_block_bytes
        if non_limiting > baseline_limit
        else 0
    )
    return Limits(
        baseline_pool=baseline_pool,
        baseline_per_request=baseline_per_request,
        baseline_limit=baseline_limit,
        gpu_pool=gpu_pool,
        indexer_per_request=indexer,
        hot_per_request=hot,
        resident_per_request=resident,
        hisparse_gpu_per_request=per_request,
        offloaded_gpu_limit=offloaded_gpu_limit,
        host_per_request=host_per_request,
        host_pool=host_pool,
        host_limit=host_limit,
        hisparse_gpu_limit=max(baseline_limit, offloaded_gpu_limit),
        hisparse_limit=int(max(baseline_limit, offloaded_limit)),
        non_limiting_host_bytes=host_bytes,
    )


def min_host_pool_gib(limits: Limits) -> int:
    """Smallest whole-GiB host pool per DP rank that does not limit HiSparse (0: not needed)."""
    return math.ceil(limits.non_limiting_host_bytes / GIB)


def multiplier(hisparse_total: int, baseline_total: int) -> float | None:
    """HiSparse / baseline; inf when only HiSparse serves the length, None when neither does."""
    if baseline_total > 0:
        return hisparse_total / baseline_total
    return math.inf if hisparse_total > 0 else None


@dataclass(frozen=True)
class Variant:
    """One hot-buffer sizing (calculator default, or MTP-aware) at one sequence length."""

    hot_rows: int
    host_pool_gib: float  # the slider value used (given, or the clamped minimum)
    effective_host_pool_gib: float  # after the system-RAM budget
    min_host_pool_gib: int
    limits: Limits
    hisparse_requests: int  # total over DP
    multiplier: float | None
    limiter: str
    indexer_offload: dict[str, Any]
    physical_host_gib: float
    ram_warning: str | None
    composition: dict[str, Any]


def _limiter(dep: Deployment, lim: Limits) -> str:
    offloaded = min(dep.max_seqs, lim.offloaded_gpu_limit, lim.host_limit)
    if lim.baseline_limit >= offloaded:
        return "full GPU residency (HiSparse adds nothing)"
    if lim.offloaded_gpu_limit <= lim.host_limit and lim.offloaded_gpu_limit <= dep.max_seqs:
        return "HiSparse GPU pool"
    if lim.host_limit <= lim.offloaded_gpu_limit and lim.host_limit <= dep.max_seqs:
        return "host pool"
    return "max sequences"


def evaluate_variant(
    dep: Deployment, seq_len: int, hot_rows: int, concurrency: int | None = None
) -> Variant:
    unconstrained = capacity_at(dep, seq_len, hot_rows)
    minimum = min_host_pool_gib(unconstrained)
    if dep.host_pool_gib is None:
        low, high = HOST_SLIDER_GIB
        slider = float(min(high, max(low, minimum)))
    else:
        slider = dep.host_pool_gib
    copies = dep.host_copies
    effective_host = min(slider, dep.system_ram_gib / copies)
    requested_indexer = dep.indexer_offload_gib
    effective_indexer = min(
        requested_indexer, max(0.0, dep.system_ram_gib - effective_host * copies)
    )
    requested_host_total = slider * copies + requested_indexer
    ram_warning = None
    if requested_host_total > dep.system_ram_gib:
        ram_warning = (
            f"host pools request {requested_host_total:,.0f} GiB but the system RAM budget is "
            f"{dep.system_ram_gib:,.0f} GiB; HiSparse pools are reserved first, the effective "
            f"indexer offload pool is {effective_indexer:,.0f} GiB"
        )
    lim = capacity_at(dep, seq_len, hot_rows, effective_host)
    baseline_total = lim.baseline_limit * dep.dp
    hisparse_total = lim.hisparse_limit * dep.dp

    per_request = lim.indexer_per_request * dep.hisparse_block_bytes * dep.tp
    coverage = math.floor(effective_indexer * GIB / per_request) if per_request > 0 else 0
    indexer_offload = {
        "requested_gib": requested_indexer,
        "effective_gib": effective_indexer,
        "per_request_gib": per_request / GIB,
        "coverage_requests": coverage if requested_indexer > 0 else None,
    }
    bar_concurrency = (
        lim.hisparse_limit if concurrency is None else min(concurrency, lim.hisparse_limit)
    )
    composition = _composition(dep, lim, effective_host, effective_indexer, max(0, bar_concurrency))
    return Variant(
        hot_rows=hot_rows,
        host_pool_gib=slider,
        effective_host_pool_gib=effective_host,
        min_host_pool_gib=minimum,
        limits=lim,
        hisparse_requests=hisparse_total,
        multiplier=multiplier(hisparse_total, baseline_total),
        limiter=_limiter(dep, lim),
        indexer_offload=indexer_offload,
        physical_host_gib=effective_host * copies + effective_indexer,
        ram_warning=ram_warning,
        composition=composition,
    )


def _composition(
    dep: Deployment, lim: Limits, effective_host: float, effective_indexer: float, concurrency: int
) -> dict[str, Any]:
    """Memory per DP group at `concurrency` requests, as the calculator's bars (recipe.md 7.5)."""
    tp = dep.tp
    page = dep.hisparse_block_bytes
    gpu_total = dep.gpu_bytes * tp
    weights = dep.weights_gib_per_gpu * GIB * tp
    available_kv = dep.kv_gib_per_gpu * GIB * tp
    reserve = max(0.0, gpu_total - weights - available_kv)
    indexer_blocks = concurrency * lim.indexer_per_request
    full_standard_per_request = (
        math.ceil(lim.host_per_request * dep.host_block_bytes / page) + dep.other_gpu_blocks
    )
    full_standard = concurrency * full_standard_per_request
    fully_resident = indexer_blocks + full_standard <= lim.gpu_pool
    hot_blocks = 0 if fully_resident else concurrency * lim.hot_per_request
    standard_blocks = (
        full_standard
        if fully_resident
        else max(0, min(full_standard, lim.gpu_pool - indexer_blocks - hot_blocks))
    )
    hot = hot_blocks * page * tp
    indexer = indexer_blocks * page * tp
    standard = standard_blocks * page * tp
    unused = max(0.0, available_kv - hot - indexer - standard)

    copies = dep.host_copies_per_dp
    indexer_per_dp = effective_indexer / dep.dp * GIB
    cpu_total = effective_host * copies * GIB + indexer_per_dp
    cpu_host = concurrency * lim.host_per_request * dep.host_block_bytes * copies
    per_request_offload = lim.indexer_per_request * page * tp
    cpu_indexer = min(concurrency * per_request_offload, indexer_per_dp)
    cpu_unused = max(0.0, cpu_total - cpu_host - cpu_indexer)

    def clamp(total: float, segments: dict[str, float]) -> dict[str, float]:
        return {k: max(0.0, min(v, total)) for k, v in segments.items()}

    return {
        "concurrency_per_dp": concurrency,
        "fully_resident": fully_resident,
        "gpu": {
            "total_bytes": gpu_total,
            "segments": clamp(
                gpu_total,
                {
                    "Model weights": weights,
                    "vLLM runtime + HBM headroom": reserve,
                    "Hot buffers": hot,
                    "Indexer KV": indexer,
                    "Standard KV": standard,
                    "Unused KV": unused,
                },
            ),
        },
        "cpu": {
            "total_bytes": cpu_total,
            "segments": clamp(
                cpu_total,
                {
                    "HiSparse latent KV": cpu_host,
                    "Native indexer offload": cpu_indexer,
                    "Unused": cpu_unused,
                },
            ),
        },
    }


# --------------------------------------------------------------------------- full result


@dataclass(frozen=True)
class SeqResult:
    seq_len: int
    deployment: Deployment
    default: Variant  # the calculator's figure (hot rows = --hot-rows, default 2 x top-K)
    mtp: Variant | None  # hot rows = (spec + 2) x top-K, with --spec-tokens
    notes: list[str] = field(default_factory=list)

    @property
    def baseline_requests(self) -> int:
        return self.default.limits.baseline_limit * self.deployment.dp

    def to_json(self) -> dict[str, Any]:
        """The `--json` row. `multiplier` is a number, the string "inf" (HiSparse only), or null."""
        dep = self.deployment
        row: dict[str, Any] = {
            "seq_len": self.seq_len,
            "baseline_requests": self.baseline_requests,
            "hisparse_requests": self.default.hisparse_requests,
            "multiplier": _json_multiplier(self.default.multiplier),
            "min_host_pool_gib": self.default.min_host_pool_gib,
            "kv_gib_per_gpu": dep.kv_gib_per_gpu,
            "weights_gib_per_gpu": dep.weights_gib_per_gpu,
            "baseline_requests_per_dp": self.default.limits.baseline_limit,
            "hisparse_requests_per_dp": self.default.limits.hisparse_limit,
            "hisparse_gpu_limit_per_dp": self.default.limits.hisparse_gpu_limit,
            "host_limit_per_dp": _json_number(self.default.limits.host_limit),
            "limiter": self.default.limiter,
            "hot_rows": self.default.hot_rows,
            "host_pool_gib": self.default.host_pool_gib,
            "effective_host_pool_gib": self.default.effective_host_pool_gib,
            "vllm_min_host_pool_gib": vllm_min_host_pool_gib(dep, self.seq_len),
            "physical_host_gib": self.default.physical_host_gib,
            "indexer_offload": self.default.indexer_offload,
            "per_request_gib": {
                "baseline_gpu": self.default.limits.baseline_per_request
                * dep.baseline_block_bytes
                / GIB,
                "hisparse_gpu": self.default.limits.hisparse_gpu_per_request
                * dep.hisparse_block_bytes
                / GIB,
                "host": self.default.limits.host_per_request * dep.host_block_bytes / GIB,
            },
            "limits_per_dp": _limits_json(self.default.limits),
            "composition": self.default.composition,
            "ram_warning": self.default.ram_warning,
            "mtp": None,
            "notes": self.notes,
        }
        if self.mtp is not None:
            row["mtp"] = {
                "spec_tokens": dep.spec_tokens,
                "hot_rows": self.mtp.hot_rows,
                "hisparse_requests": self.mtp.hisparse_requests,
                "hisparse_requests_per_dp": self.mtp.limits.hisparse_limit,
                "multiplier": _json_multiplier(self.mtp.multiplier),
                "min_host_pool_gib": self.mtp.min_host_pool_gib,
                "host_pool_gib": self.mtp.host_pool_gib,
                "limiter": self.mtp.limiter,
                "limits_per_dp": _limits_json(self.mtp.limits),
                "composition": self.mtp.composition,
            }
        return row


def _json_multiplier(value: float | None) -> float | str | None:
    if value is None:
        return None
    return "inf" if math.isinf(value) else value


def _json_number(value: float) -> float | int | str:
    if math.isinf(value):
        return "inf"
    return int(value) if float(value).is_integer() else value


def _limits_json(lim: Limits) -> dict[str, Any]:
    return {k: _json_number(v) for k, v in asdict(lim).items()}


def vllm_min_host_pool_gib(dep: Deployment, seq_len: int) -> float:
    """vLLM refuses to start below cdiv(max_model_len, block) + 2 host blocks (vllm.md 1.4)."""
    return (math.ceil(seq_len / dep.host_block_tokens) + 2) * dep.host_block_bytes / GIB


def evaluate(dep: Deployment, seq_len: int, *, concurrency: int | None = None) -> SeqResult:
    default = evaluate_variant(dep, seq_len, dep.hot_rows, concurrency)
    mtp = None
    if dep.mtp_rows is not None:
        mtp = evaluate_variant(dep, seq_len, dep.mtp_rows, concurrency)
    notes = list(dep.notes)
    if default.ram_warning:
        notes.append(default.ram_warning)
    if dep.host_pool_gib is not None:
        floor_gib = vllm_min_host_pool_gib(dep, seq_len)
        if dep.host_pool_gib < floor_gib:
            notes.append(
                f"host pool {dep.host_pool_gib:g} GiB < {floor_gib:.2f} GiB: vLLM refuses to start "
                f"with max-model-len {seq_len:,} (needs cdiv(len, 64) + 2 host blocks)"
            )
    return SeqResult(seq_len=seq_len, deployment=dep, default=default, mtp=mtp, notes=notes)


def evaluate_many(
    dep: Deployment, seq_lens: list[int], *, concurrency: int | None = None
) -> list[SeqResult]:
    return [evaluate(dep, s, concurrency=concurrency) for s in seq_lens]


def parse_seq_range(text: str) -> list[int]:
    """START:STOP:STEP, STOP inclusive (like the calculator's slider, 8192:1048576:1024)."""
    parts = text.split(":")
    try:
        if len(parts) != 3:
            raise ValueError
        start, stop, step = (int(p.replace(",", "").replace("_", "")) for p in parts)
    except ValueError:
        raise ConfigError(f"--seq-range {text!r}: expected START:STOP:STEP integers") from None
    if start < 1 or step < 1 or stop < start:
        raise ConfigError(f"--seq-range {text!r}: need 1 <= START <= STOP and STEP >= 1")
    values = list(range(start, stop + 1, step))
    if len(values) > 100_000:
        raise ConfigError(f"--seq-range {text!r}: {len(values):,} lengths; at most 100,000")
    return values


def chart_curve(
    dep: Deployment, hot_rows: int, seq_lens: list[int]
) -> list[tuple[int, int, int, int]]:
    """(seq, baseline total, HiSparse total, min host GiB) with a non-limiting host pool (7.6)."""
    out = []
    for seq in seq_lens:
        lim = capacity_at(dep, seq, hot_rows)
        out.append(
            (seq, lim.baseline_limit * dep.dp, lim.hisparse_limit * dep.dp, min_host_pool_gib(lim))
        )
    return out


CHART_SEQ_LENS = list(range(8192, 1048576 + 1, 1024))  # the calculator's chart grid
