"""Hardware and compute facts the step-cost model needs beyond the capacity model file.

The capacity model (`launch/models/*.yaml` via `harness.capacity`) owns KV geometry, block bytes
and weight sizes; these tables hold only what it does not: GPU peak rates and a model's active
parameters and routing (docs/simulator.md §5). A model or GPU missing here is an error.
Datasheet peaks only: what fraction of them is reached is a calibrated parameter (cost.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import ConfigError


@dataclass(frozen=True)
class GpuFacts:
    name: str
    hbm_tbps: float  # HBM bandwidth, TB/s
    fp8_tflops: float  # dense FP8 peak
    pcie_gbps: float  # host <-> device, per direction, GB/s
    nvlink_gbps: float  # NVLink, per direction per GPU, GB/s
    allreduce_us: float  # latency of one small TP all-reduce (two per layer)


@dataclass(frozen=True)
class ComputeFacts:
    name: str
    active_params: float  # parameters touched per token
    moe_layers: int
    experts_per_token: int  # routed top-k
    expert_params: float  # one routed expert
    hidden_size: int
    vocab_size: int
    indexer_params: float  # one DSA indexer's projections (replicated per rank)
    mtp_params: float  # the MTP module's own weights (loaded only with MTP)


GPUS: dict[str, GpuFacts] = {
    # docs/simulator.md §5: H200 SXM 4.8 TB/s, FP8 1,979 TFLOPS dense, PCIe Gen5 x16 64 GB/s, NVLink 450
    # GB/s per direction, ~15 us per small all-reduce.
    "h200": GpuFacts("h200", 4.8, 1979.0, 64.0, 450.0, 15.0),
    # NVIDIA B200 / B300 (HGX) datasheets: 8 TB/s HBM3e, NVLink 5 at 900 GB/s per direction,
    # PCIe Gen5 x16 to the host on B200 (Gen6 x16, 128 GB/s, on B300); dense FP8 4.5 PFLOPS
    # for both. All-reduce latency assumed as on H200.
    "b200": GpuFacts("b200", 8.0, 4500.0, 64.0, 900.0, 15.0),
    "b300": GpuFacts("b300", 8.0, 4500.0, 128.0, 900.0, 15.0),
}

COMPUTE: dict[str, ComputeFacts] = {
    # docs/simulator.md §5: 40.7 B active, 75 MoE layers, top-8 of 256 routed experts of 37.7 M parameters,
    # vocabulary 154,880; docs/vllm.md §6: hidden 6144, indexer 32 heads x 128 dims.
    # Indexer projections (DeepSeek-V3.2 shapes with GLM-5's sizes, estimate): wq_b
    # 2048 x (32 x 128) + wk 6144 x 128 + weights_proj 6144 x 32 = 9.4 M.
    # MTP module (estimate): one MoE decoder layer (165 M attention + 257 x 37.7 M experts)
    # plus eh_proj 2 x 6144 x 6144 = 9.93 B parameters; embedding and head are shared.
    "glm-5.3": ComputeFacts("glm-5.3", 40.7e9, 75, 8, 37.7e6, 6144, 154880, 9.4e6, 9.93e9),
}


def gpu_facts(name: str, where: str) -> GpuFacts:
    if name not in GPUS:
        raise ConfigError(
            f"{where}: gpu {name!r} has no simulator facts (known: {', '.join(GPUS)})"
        )
    return GPUS[name]


def compute_facts(model: str, where: str) -> ComputeFacts:
    if model not in COMPUTE:
        raise ConfigError(
            f"{where}: model {model!r} has no simulator compute facts (known: {', '.join(COMPUTE)})"
        )
    return COMPUTE[model]
