"""Step time: a roofline over the batch (default) or a linear table fitted to measured steps.

Every constant of the roofline is a field of `Roofline` (sim.md section 5); the six that a
calibration may fit are listed in `FIT_PARAMS` with their physical bounds.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from harness.sim.scheduler import Scheduled

GIB = 2**30


@dataclass
class StepStats:
    """What a step's batch asks of the hardware (per TP rank unless stated)."""

    decode_reqs: int = 0
    decode_tokens: int = 0
    prefill_tokens: int = 0
    attn_rows: int = 0  # top-K rows read by decoding requests
    indexer_rows: int = 0  # indexer keys scanned by decoding requests
    prefill_attn_rows: int = 0  # sum over prefill tokens of min(position, top-K)
    prefill_indexer_rows: int = 0  # sum over prefill tokens of their position
    offloaded_rows: int = 0  # top-K rows wanted by requests with host-only history
    staged_rows: int = 0  # host-only history rows a HiSparse prefill chunk stages first


def step_stats(batch: list[Scheduled], *, topk: int, verify_width: int) -> StepStats:
    s = StepStats()
    for item in batch:
        ctx, n = item.context, item.tokens
        if item.prefill:
            s.prefill_tokens += n
            if item.req.offloaded:
                s.staged_rows += ctx
            s.prefill_indexer_rows += n * ctx + n * (n - 1) // 2
            below = max(0, min(n, topk - ctx))  # tokens whose position is still < top-K
            s.prefill_attn_rows += below * ctx + below * (below - 1) // 2 + (n - below) * topk
        else:
            s.decode_reqs += 1
            s.decode_tokens += n
            rows = min(ctx, topk * verify_width)
            s.attn_rows += rows
            s.indexer_rows += ctx
            if item.req.offloaded:
                s.offloaded_rows += topk * n
    return s


# Fittable: name -> (low, high). Bounds are physical: efficiencies of peak, a miss fraction, an
# MTP acceptance length for 3 drafts, a fixed per-step overhead in ms.
FIT_PARAMS: dict[str, tuple[float, float]] = {
    "hbm_eff": (0.3, 0.95),
    "prefill_eff": (0.02, 0.6),
    "pcie_eff": (0.02, 0.9),
    "miss_rate": (0.0, 0.6),
    "acceptance_length": (1.0, 4.0),
    "step_overhead_ms": (0.0, 20.0),
    # Bytes of one offloaded block in the served layout / the calculator's block bytes: the
    # FP8 row with scales is 656 B, not 576 (sim.md 3), and cache groups may be padded.
    "host_bytes_scale": (1.0, 2.0),
    # KV budget per GPU, GiB: the calculator's 17.8 (15 GiB runtime reserve) up to the
    # roofline estimate 33.6 (6 GiB reserve); vLLM's start-up log states the real one (sim.md 3).
    "kv_gib_per_gpu": (15.0, 34.0),
}
CONFIG_PARAMS = ("kv_gib_per_gpu",)  # applied when the pools are sized, not in the step cost


@dataclass
class Roofline:
    # From the capacity model file, GpuFacts and ComputeFacts (config.py fills them; no
    # defaults here so that no second copy of a model's numbers lives in the engine).
    tp: int
    hbm_tbps: float
    fp8_tflops: float
    pcie_gbps: float
    allreduce_ms: float
    mtp_draft_ms: float
    shared_gib: float
    routed_gib: float
    ep_shards: int
    n_experts: int
    experts_per_token: int
    active_params: float
    row_bytes: int  # latent bytes per token, all layers
    indexer_row_bytes: int  # indexer key bytes per token, all indexer layers
    attn_flops_per_row: float  # per query token per top-K row, all layers
    indexer_flops_per_row: float  # per query token per scanned key, all indexer layers
    spec_tokens: int
    # fitted (FIT_PARAMS)
    hbm_eff: float = 0.8
    prefill_eff: float = 0.4
    pcie_eff: float = 0.8
    miss_rate: float = 0.2
    acceptance_length: float = 2.8
    step_overhead_ms: float = 0.0
    host_bytes_scale: float = 1.0
    # Not fitted: time before the engine sees a request (HTTP, chat template, tokenising the
    # whole re-sent history), per prompt token. Estimate: ~1 us/token for a fast tokenizer plus
    # as much again for templating and the API server (sim.md 2: the gauge reads below the
    # client's in-flight count for this reason).
    frontend_us_per_token: float = 2.0

    def pcie_bytes_per_s(self) -> float:
        return self.pcie_gbps * 1e9 * self.pcie_eff

    def staging_time(self, rows: int) -> float:
        """Host->GPU copy of a prefill's host-only history, in the served layout."""
        return rows * self.row_bytes * self.host_bytes_scale / self.pcie_bytes_per_s()

    def step_time(self, s: StepStats) -> float:
        hbm = self.hbm_tbps * 1e12 * self.hbm_eff
        tokens = s.decode_tokens + s.prefill_tokens
        touched = 1.0 - (1.0 - self.experts_per_token / self.n_experts) ** tokens
        weights = (self.shared_gib / self.tp + self.routed_gib / self.ep_shards * touched) * GIB
        kv = s.attn_rows * self.row_bytes + s.indexer_rows * self.indexer_row_bytes
        memory = (weights + kv) / hbm
        flops = (
            2.0 * self.active_params * tokens
            + self.attn_flops_per_row * s.prefill_attn_rows
            + self.indexer_flops_per_row * s.prefill_indexer_rows
        )
        compute = flops / (self.tp * self.fp8_tflops * 1e12 * self.prefill_eff)
        miss = s.offloaded_rows * self.miss_rate * self.row_bytes / self.pcie_bytes_per_s()
        miss += self.staging_time(s.staged_rows)
        fixed = self.allreduce_ms + (self.mtp_draft_ms if self.spec_tokens else 0.0)
        return (self.step_overhead_ms + fixed) / 1000.0 + max(memory, compute) + miss

    def fitted(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name in FIT_PARAMS}


TABLE_FEATURES = ("decode_reqs", "decode_tokens", "prefill_tokens", "indexer_rows")


@dataclass
class TableCost:
    """step = intercept + sum(coef x feature): fitted to steps measured on a real server."""

    intercept: float
    coefs: dict[str, float]
    pcie_bps: float = 16e9

    def pcie_bytes_per_s(self) -> float:
        return self.pcie_bps

    def staging_time(self, rows: int) -> float:
        """Host->GPU copy of a prefill's host-only history, in the served layout."""
        return rows * self.row_bytes * self.host_bytes_scale / self.pcie_bytes_per_s()

    def step_time(self, s: StepStats) -> float:
        return self.intercept + sum(c * getattr(s, k) for k, c in self.coefs.items())


def fit_table(rows: list[tuple[StepStats, float]]) -> TableCost:
    """Least squares over measured (stats, seconds) rows; features with no spread are dropped."""
    import numpy as np

    names = [k for k in TABLE_FEATURES if len({getattr(s, k) for s, _ in rows}) > 1]
    x = np.array([[1.0] + [float(getattr(s, k)) for k in names] for s, _ in rows])
    y = np.array([t for _, t in rows])
    sol, *_ = np.linalg.lstsq(x, y, rcond=None)
    return TableCost(float(sol[0]), {k: max(0.0, float(c)) for k, c in zip(names, sol[1:])})
