"""Hardware and compute facts the step-cost model needs beyond the capacity model file.

The capacity model (`launch/models/*.yaml` via `harness.capacity`) owns KV geometry, block bytes
and weight sizes; these tables hold only what it does not: GPU peak rates and a model's active
parameters and routing (reference/sim.md section 5). A model or GPU missing here is an error.
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
    allreduce_us_per_layer: float  # one TP all-reduce (two per layer)


@dataclass(frozen=True)
class ComputeFacts:
    name: str
    active_params: float  # parameters touched per token
    moe_layers: int
    experts_per_token: int  # routed top-k
    mtp_draft_ms: float  # MTP draft passes per step


GPUS: dict[str, GpuFacts] = {
    # sim.md 5: H200 SXM 4.8 TB/s, FP8 1,979 TFLOPS, PCIe Gen5 x16 64 GB/s, ~15 us all-reduce.
    "h200": GpuFacts("h200", 4.8, 1979.0, 64.0, 15.0),
}

COMPUTE: dict[str, ComputeFacts] = {
    # sim.md 5: 40.7 B active, 75 MoE layers, top-8 routing, ~0.6 ms of MTP draft passes.
    "glm-5.3": ComputeFacts("glm-5.3", 40.7e9, 75, 8, 0.6),
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
