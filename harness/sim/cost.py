"""Step time from the hardware's limits (default), or a linear table fitted to measured steps.

A step is one forward of the target model over every scheduled token, plus, with MTP, the
drafter's one-layer forwards (`Roofline.step_time`). Each kernel group of a layer takes the
larger of a latency floor and its bytes / HBM bandwidth or FLOPs / peak, so that at batch 1 the
step is latency-bound (a 4-token verify costs little more than a 1-token decode) and at a large
batch it is bandwidth-bound (the expert weights touched grow with the tokens). Every constant
comes from the capacity model file and `facts.py`; the free parameters, their bounds and their
physical meaning are `FIT_PARAMS` / `PARAM_MEANING` (written into every calibration file).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

from harness.sim.request import Request
from harness.sim.scheduler import Scheduled

GIB = 2**30
# vLLM runs a TP8 sparse-MLA prefill through the FP8 *decode* kernel (mixed batch mode: the BF16
# prefill kernel would pad 8 heads per rank to 128; vLLM `v1/attention/backends/mla/
# flashmla_sparse.py`), so every prefill token gathers its top-K rows like a decode query.
SERVED_ROW_BYTES = (
    656  # fp8_ds_mla row: 512 B latent + 16 B scales + 128 B bf16 RoPE (docs/simulator.md §3)
)
LOGIT_BYTES = 8  # the indexer's fp32 logit per (query, key): written, then read by the top-K
NVLINK_EFF = 0.8  # NCCL all-reduce bus bandwidth / NVLink peak, fixed (not fitted)


@dataclass
class StepStats:
    """What a step's batch asks of the hardware (per TP rank unless stated)."""

    decode_reqs: int = 0
    decode_tokens: int = 0
    prefill_tokens: int = 0
    attn_rows: int = 0  # top-K rows read by decoding requests
    indexer_rows: int = 0  # indexer keys scanned by decoding requests
    indexer_pairs: int = 0  # (query, key) logits of decoding requests
    prefill_attn_rows: int = 0  # sum over prefill tokens of min(position, top-K)
    prefill_indexer_rows: int = 0  # sum over prefill tokens of their position
    prefill_indexer_keys: int = 0  # indexer keys a prefill chunk reads (its whole context)
    offloaded_rows: float = 0  # top-K rows of host-resident requests not readable on the GPU
    staged_rows: float = 0  # history rows a HiSparse prefill chunk stages from host first
    hot_rows: int = 0  # top-K rows wanted by host-resident requests (the hit-rate base)


def _all_missing(req: Request) -> float:
    return 1.0 if req.offloaded else 0.0


def step_stats(
    batch: list[Scheduled],
    *,
    topk: int,
    verify_width: int,
    missing: Callable[[Request], float] = _all_missing,
) -> StepStats:
    """`missing(req)`: the share of a request's history not readable on the GPU (the residency's
    `missing_fraction`); only those rows are staged for a prefill (vLLM 0.32.0
    `v1/hisparse/runtime.py` ensure_gpu_sources serves the rest from the resident cache) or
    copied for a decode's top-K."""
    s = StepStats()
    for item in batch:
        ctx, n = item.context, item.tokens
        if item.prefill:
            s.prefill_tokens += n
            s.staged_rows += ctx * missing(item.req)
            s.prefill_indexer_rows += n * ctx + n * (n - 1) // 2
            s.prefill_indexer_keys += ctx + n
            below = max(0, min(n, topk - ctx))  # tokens whose position is still < top-K
            s.prefill_attn_rows += below * ctx + below * (below - 1) // 2 + (n - below) * topk
        else:
            s.decode_reqs += 1
            s.decode_tokens += n
            s.attn_rows += min(ctx, topk * verify_width)
            s.indexer_rows += ctx
            s.indexer_pairs += n * ctx
            if item.req.offloaded:
                s.hot_rows += topk * n
                s.offloaded_rows += topk * n * missing(item.req)
    return s


# Parameters a calibration may set -> (low, high): physical bounds (issue 24: HBM 0.6-0.9 of the
# datasheet bandwidth, prefill >= 0.15 of FP8 peak, MTP3 acceptance 1-4).
FIT_PARAMS: dict[str, tuple[float, float]] = {
    "hbm_eff": (0.6, 0.9),
    # Sparse attention reads its top-K rows as scattered 656 B gathers (decode, and prefill
    # through the decode kernel), not streams: a lower fraction of the datasheet bandwidth.
    "gather_eff": (0.2, 0.9),
    "prefill_eff": (0.15, 0.6),
    "kernel_floor_us": (2.0, 60.0),
    "step_overhead_ms": (0.0, 5.0),
    "acceptance_length": (1.0, 4.0),
    # How far one request's mean acceptance lies from the arm's (the drafter predicts some replies
    # better than others): uniform within acceptance_length x (1 +- spread) (docs/simulator.md §5b).
    "acceptance_spread": (0.0, 0.5),
    "miss_rate": (0.0, 0.6),
    "pcie_eff": (0.3, 0.9),
    # Served bytes of an offloaded block / the calculator's (47,700 B/token): from the
    # fp8_ds_mla rows with the MTP layer (79 x 656 + 22 x 132 = 54,728 B: 1.15) up to every
    # indexer layer's page padded to the MLA page (101 x 656 = 66,256 B: 1.39), as a KV cache
    # manager that unifies page sizes across layers would store them.
    "host_bytes_scale": (1.0, 1.45),
    # An explicit KV budget per GPU, GiB (`--set sim.kv_gib_per_gpu=...`): it replaces the pool
    # derived from `runtime_gib`; calibrations no longer fit it.
    "kv_gib_per_gpu": (15.0, 34.0),
    # What vLLM's start-up profile takes from the GPU besides the weights (docs/simulator.md §3):
    # peak activations of a max_num_batched_tokens forward (fused-MoE intermediates ~3 GiB at
    # 32,768 tokens, hidden and indexer buffers), CUDA graphs (0.5-2 GiB), NCCL/cuBLAS (1-3 GiB):
    # from the roofline's 6 GiB reserve up to the calculator's 15 GiB and a little beyond.
    "runtime_gib": (4.0, 16.0),
    # API server before the engine: chat template, tokenising the whole re-sent history, hashing
    # its blocks; per prompt token (a fast tokenizer alone is ~1 us/token).
    "frontend_us_per_token": (0.5, 10.0),
    # Threads preparing requests before the engine, first come first served: vLLM 0.32.0's API
    # server renders and tokenises on a pool of one (config/model.py renderer_num_workers).
    "frontend_threads": (1.0, 64.0),
    # Worker CPU time to submit one copy descriptor (one layer's page of one block) to the
    # driver's batched copy call; the connector never merges adjacent pages (docs/simulator.md
    # §6a, "Copy submission"): ~0.5-0.63 us measured on an H100 host.
    "copy_submit_us": (0.0, 2.0),
}
CONFIG_PARAMS = ("kv_gib_per_gpu", "runtime_gib")  # applied when the pools are sized
PARAM_MEANING: dict[str, str] = {
    "hbm_eff": "achieved / datasheet HBM bandwidth for weight and KV streams",
    "gather_eff": "achieved / datasheet HBM bandwidth for the sparse attention's scattered "
    "656 B top-K row reads",
    "prefill_eff": "achieved / dense FP8 peak for the GEMMs of a large (prefill) batch",
    "kernel_floor_us": "latency floor of one kernel group (launch + a batch-1 kernel), us",
    "step_overhead_ms": "host time per step not hidden by the GPU (schedule, sample, prepare)",
    "acceptance_length": "mean tokens emitted per MTP3 verify step (check: spec-decode counters)",
    "acceptance_spread": "relative half-range of one request's mean acceptance length around "
    "the arm's (content-dependent; drafts drawn per step; check: per-request tokens per chunk)",
    "miss_rate": "fraction of a host-resident request's top-K rows copied from host per step",
    "pcie_eff": "achieved / datasheet PCIe bandwidth for host-to-device copies",
    "host_bytes_scale": "served bytes of an offloaded block / the calculator's (47,700 B/token), "
    "which sizes the host pools; derived per MTP mode unless set (1.147 with MTP3, 1.131 without; "
    "a fitted value is the CPU pool's effective capacity, docs/simulator.md §3)",
    "kv_gib_per_gpu": "explicit KV cache budget per GPU, GiB (replaces the derived pool)",
    "runtime_gib": "GPU memory per GPU besides weights and KV: peak activations of the profile "
    "run, CUDA graphs, NCCL/cuBLAS buffers, GiB (the KV pool is what remains)",
    "frontend_us_per_token": "API-server time per prompt token before the engine sees it, us",
    "frontend_threads": "API-server threads preparing requests one at a time each (vLLM 0.32.0: "
    "1); unset: every request prepared at once (docs/simulator.md §6a)",
    "copy_submit_us": "worker CPU time per copy descriptor the offloading connector submits "
    "(one per block and layer page), us; the part longer than the GPU's previous step stalls "
    "the next one (docs/simulator.md §6a)",
}


@dataclass
class Roofline:
    # From the capacity model file, GpuFacts and ComputeFacts (config.py fills them; no
    # defaults here so that no second copy of a model's numbers lives in the engine).
    tp: int
    hbm_tbps: float
    fp8_tflops: float
    pcie_gbps: float
    nvlink_gbps: float  # per direction per GPU
    allreduce_us: float  # latency of one small TP all-reduce
    num_layers: int
    moe_layers: int
    indexer_layers: int
    hidden_size: int
    vocab_size: int
    shared_gib: float  # weights every rank holds a 1/TP share of (attention, dense, embeddings)
    routed_gib: float
    ep_shards: int
    n_experts: int
    experts_per_token: int
    expert_params: float
    active_params: float
    indexer_params: float  # per indexer layer; replicated on every rank
    row_bytes: int  # latent bytes per token, all layers (the calculator's host layout)
    indexer_row_bytes: int  # indexer key bytes per token, all indexer layers
    attn_flops_per_row: float  # per query token per top-K row, all layers, all heads
    indexer_flops_per_row: float  # per query token per scanned key, all indexer layers
    spec_tokens: int
    # parameters (FIT_PARAMS); defaults are docs/simulator.md §5's starting values
    hbm_eff: float = 0.75
    gather_eff: float | None = None  # None: as streams (hbm_eff), unless calibrated
    prefill_eff: float = 0.4
    kernel_floor_us: float = 10.0
    step_overhead_ms: float = 1.0
    acceptance_length: float = 2.8
    acceptance_spread: float | None = None  # None: every request emits evenly (harness/sim/mtp.py)
    miss_rate: float = 0.2
    pcie_eff: float = 0.8
    host_bytes_scale: float = 1.0  # the calculator's layout (`--calibration none`)
    # Time before the engine sees a request (docs/simulator.md §2: the gauge reads below the client's
    # in-flight count for this reason). Estimate: ~1-2 us/token for a fast tokenizer, as much
    # again for the chat template, the API server and hashing the prompt's blocks.
    frontend_us_per_token: float = 4.0
    # None: every request is prepared at once (no queue before the engine); vLLM runs one thread
    # (docs/simulator.md §6a: what one changes, and why the shipped calibration leaves it unset).
    frontend_threads: float | None = None
    # A measured constant, not fitted (docs/simulator.md §6a, "Copy submission").
    copy_submit_us: float = 0.55

    def pcie_bytes_per_s(self) -> float:
        return self.pcie_gbps * 1e9 * self.pcie_eff

    def staging_time(self, rows: float) -> float:
        """Host->GPU copy of a prefill's host-only history, in the served layout."""
        return rows * self.row_bytes * self.host_bytes_scale / self.pcie_bytes_per_s()

    # ---------------------------------------------------------------- per kernel group
    def _k(self) -> dict[str, float]:
        """Per-rank constants in seconds (a step's cost is evaluated ~1e5 times per sweep);
        recomputed whenever a parameter changes (config sets them after construction)."""
        key = (
            self.hbm_eff,
            self.gather_eff,
            self.prefill_eff,
            self.kernel_floor_us,
            self.tp,
            self.ep_shards,
        )
        cache = self.__dict__.get("_cache")
        if cache is not None and cache[0] == key:
            return cache[1]
        hbm = self.hbm_tbps * 1e12 * self.hbm_eff
        peak = self.fp8_tflops * 1e12 * self.prefill_eff
        head = self.vocab_size * self.hidden_size * 2.0 / self.tp  # bf16, vocab-parallel
        dense_bytes = max(0.0, (self.shared_gib * GIB / self.tp - 2 * head) / self.num_layers)
        routed_active = self.moe_layers * self.experts_per_token * self.expert_params
        dense_params = self.active_params - routed_active - 2 * self.vocab_size * self.hidden_size
        k = {
            "floor": self.kernel_floor_us * 1e-6,
            "dense_bytes": dense_bytes / hbm,
            "dense_flops": 2.0 * max(0.0, dense_params) / self.num_layers / self.tp / peak,
            "row_bytes": SERVED_ROW_BYTES
            / (self.hbm_tbps * 1e12 * (self.gather_eff or self.hbm_eff)),
            "row_flops": self.attn_flops_per_row / self.num_layers / self.tp / peak,
            "routed_bytes": self.routed_gib * GIB / self.moe_layers / self.ep_shards / hbm,
            "expert_flops": 2.0 * self.experts_per_token * self.expert_params / self.tp / peak,
            # Replicated (vLLM `ReplicatedLinear` in model_executor/models/deepseek_v2.py): the
            # indexer's weights, keys and logits are per rank, not divided by TP.
            "idx_weights": self.indexer_params / hbm,
            "idx_flops": 2.0 * self.indexer_params / peak,
            "key_bytes": self.indexer_row_bytes / self.indexer_layers / hbm,
            "logit_bytes": LOGIT_BYTES / hbm,
            "pair_flops": self.indexer_flops_per_row / self.indexer_layers / peak,
            "head_bytes": head / hbm,
            "head_flops": head / peak,  # 2 FLOPs per bf16 parameter (2 B) per logit
            "keep": 1.0 - self.experts_per_token / self.n_experts,
        }
        self.__dict__["_cache"] = (key, k)
        return k

    def _allreduce(self, tokens: int) -> float:
        """One TP all-reduce of the hidden states (bf16), ring volume over NVLink."""
        if self.tp <= 1:
            return 0.0
        volume = 2.0 * (self.tp - 1) / self.tp * tokens * self.hidden_size * 2
        return max(self.allreduce_us * 1e-6, volume / (self.nvlink_gbps * 1e9 * NVLINK_EFF))

    def _layers(
        self, tokens: int, rows: float, idx_keys: float, idx_pairs: float
    ) -> tuple[float, float, float, float]:
        """One layer's kernel groups (dense, attention, MoE, indexer), each the larger of the
        latency floor and bytes / achieved HBM or FLOPs / achieved peak (per rank, seconds)."""
        k = self._k()
        floor = k["floor"]
        dense = max(floor, k["dense_bytes"], k["dense_flops"] * tokens)
        attn = max(floor, rows * k["row_bytes"], rows * k["row_flops"])
        touched = 1.0 - k["keep"] ** tokens
        moe = max(floor, k["routed_bytes"] * touched, k["expert_flops"] * tokens)
        indexer = max(
            floor,
            k["idx_weights"] + idx_keys * k["key_bytes"] + idx_pairs * k["logit_bytes"],
            k["idx_flops"] * tokens + idx_pairs * k["pair_flops"],
        )
        return dense, attn, moe, indexer

    def _head(self, logits: int) -> float:
        k = self._k()
        return max(k["floor"], k["head_bytes"], k["head_flops"] * logits)

    def forward_time(self, s: StepStats) -> float:
        """The target model over every scheduled token (verify included)."""
        tokens = s.decode_tokens + s.prefill_tokens
        if tokens == 0:
            return 0.0
        rows = s.attn_rows + s.prefill_attn_rows
        keys = s.indexer_rows + s.prefill_indexer_keys
        pairs = s.indexer_pairs + s.prefill_indexer_rows
        dense, attn, moe, indexer = self._layers(tokens, rows, keys, pairs)
        layers = (
            self.num_layers * (dense + attn + 2 * self._allreduce(tokens))
            + self.moe_layers * moe
            + self.indexer_layers * indexer
        )
        return layers + self._head(s.decode_tokens + (1 if s.prefill_tokens else 0))

    def draft_time(self, s: StepStats) -> float:
        """MTP: `spec_tokens` forwards of the one MTP layer (a full sparse-MLA + MoE layer with
        its indexer) and the shared head. The first runs over every token of the step (it
        builds the MTP layer's KV for prefills too), the others over one token per decode."""
        if not self.spec_tokens or s.decode_reqs == 0:
            return 0.0
        tokens = s.decode_tokens + s.prefill_tokens
        rows = s.attn_rows + s.prefill_attn_rows
        keys = s.indexer_rows + s.prefill_indexer_keys
        pairs = s.indexer_pairs + s.prefill_indexer_rows
        head = self._head(s.decode_reqs)
        total = sum(self._layers(tokens, rows, keys, pairs)) + 2 * self._allreduce(tokens) + head
        if self.spec_tokens > 1:
            width = self.spec_tokens + 1
            b = s.decode_reqs
            later = self._layers(b, s.attn_rows / width, s.indexer_rows, s.indexer_pairs / width)
            total += (self.spec_tokens - 1) * (sum(later) + 2 * self._allreduce(b) + head)
        return total

    def step_time(self, s: StepStats) -> float:
        miss = s.offloaded_rows * self.miss_rate * self.row_bytes * self.host_bytes_scale
        copy = miss / self.pcie_bytes_per_s()
        overhead = self.step_overhead_ms / 1000.0
        # vLLM 0.32.0 prefetches a unit's copies only for a batch of single-token decodes
        # (`v1/hisparse/runtime.py` is_hisparse_decode_batch); an MTP verify (several query
        # tokens per request) or a step with a prefill chunk stages each layer after the
        # compute before it, so its copies add up.
        if copy and s.prefill_tokens == 0 and s.decode_tokens == s.decode_reqs:
            compute = self.forward_time(s) + self.draft_time(s)
            work = overlapped(compute, copy, self.exposed_copy_share)
            return overhead + work + self.staging_time(s.staged_rows)
        transfer = copy + self.staging_time(s.staged_rows)
        return overhead + self.forward_time(s) + self.draft_time(s) + transfer

    @property
    def exposed_copy_share(self) -> float:
        """The share of the smaller of compute and miss copies that the pipeline leaves exposed:
        one index-share unit (an indexer layer and the layers reading its top-K) in
        `indexer_layers` exposes one layer's copy (or compute) of its members."""
        return min(1.0, self.indexer_layers / self.num_layers)

    def fitted(self) -> dict[str, float]:
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name in FIT_PARAMS and getattr(self, f.name) is not None
        }


def overlapped(compute: float, copy: float, exposed_share: float) -> float:
    """A single-token decode step's compute with its host-row copies running beside it, as vLLM
    0.32.0's HiSparse runtime runs them (`v1/hisparse/runtime.py` swap_in): per index-share unit, the
    leader stages every member layer's missing rows on a copy stream as soon as the unit's
    top-K is ready, and each layer's attention waits only for its own rows. A unit of n layers,
    with per-layer copy c and compute p, takes c + (n - 1) max(c, p) + p; summed over the units,
    max(C, T) + min(C, T) x units / layers."""
    return max(compute, copy) + min(compute, copy) * exposed_share


TABLE_FEATURES = ("decode_reqs", "decode_tokens", "prefill_tokens", "indexer_rows")


@dataclass
class TableCost:
    """step = intercept + sum(coef x feature): fitted to steps measured on a real server."""

    intercept: float
    coefs: dict[str, float]
    pcie_bps: float = 16e9
    row_bytes: int = 0  # a measured CPU table has no host-resident history to stage
    host_bytes_scale: float = 1.0

    def pcie_bytes_per_s(self) -> float:
        return self.pcie_bps

    def staging_time(self, rows: float) -> float:
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
