"""The blog's HiSparse concurrency calculator, as pure functions (docs/recipe.md §7).

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
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.capacity.deployment import (
    GIB,
    Deployment,
)
from harness.errors import ConfigError

# The calculator's host slider range; the host pool follows the minimum, clamped to it (7.3).
HOST_SLIDER_GIB = (16.0, 4096.0)
DEFAULT_SEQ_LEN = 81920  # the calculator's default sequence length


# --------------------------------------------------------------------------- one sequence length


@dataclass(frozen=True)
class Limits:
    """The calculator's capacityAtSequence, per DP rank.

    Block counts are per GPU: the KV cache is replicated across TP ranks."""

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
    """Memory per DP group at `concurrency` requests, as the calculator's bars
    (docs/recipe.md §7.5)."""
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
    """vLLM refuses to start below cdiv(max_model_len, block) + 2 host blocks
    (docs/vllm.md §1.4)."""
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
    values = range(start, stop + 1, step)  # len() before list(): 1:1e9:1 must not fill memory
    if len(values) > 100_000:
        raise ConfigError(f"--seq-range {text!r}: {len(values):,} lengths; at most 100,000")
    return list(values)


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
