"""The arms `repro plan` searches, and a configuration as the profile system expresses it.

An arm is one of the blog's launch profiles (docs/recipe.md §2); a configuration changes only
what the plan searches (host pool, `--max-num-seqs`, the model, TP, the point and the workload)
through ordinary profile overrides, so the simulated server and the printed `vllm serve` line
come from the same profile (docs/plan.md §2).
"""

from __future__ import annotations

import copy
import json
import shlex
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from harness.capacity.deployment import GIB
from harness.errors import ConfigError


@dataclass(frozen=True)
class Arm:
    name: str
    profile: str  # the launch profile it starts from
    policy: str  # "hisparse" or "offload": where its host pool is set
    description: str


ARMS: dict[str, Arm] = {
    a.name: a
    for a in (
        Arm(
            "hisparse", "hisparse384", "hisparse", "Hybrid HiSparse + 128 GiB indexer offload, MTP3"
        ),
        Arm("offload", "offload512", "offload", "KV offloading (OffloadingConnector), MTP3"),
        Arm("hisparse-nomtp", "hisparse384-nomtp", "hisparse", "Hybrid HiSparse, no MTP"),
        Arm("offload-nomtp", "offload512-nomtp", "offload", "KV offloading, no MTP"),
    )
}


@dataclass(frozen=True, order=True)
class Config:
    """One point of the grid: arm x host pool (GiB, per node) x max-num-seqs x concurrency."""

    arm: str
    pool_gib: float
    max_num_seqs: int
    concurrency: int

    @property
    def label(self) -> str:
        return f"{self.arm} pool={self.pool_gib:g}GiB mns={self.max_num_seqs} c{self.concurrency}"

    def to_json(self) -> dict[str, Any]:
        return {
            "arm": self.arm,
            "host_pool_gib": self.pool_gib,
            "max_num_seqs": self.max_num_seqs,
            "concurrency": self.concurrency,
        }


def arm(name: str) -> Arm:
    if name not in ARMS:
        raise ConfigError(f"--arms {name!r}: unknown arm (known: {', '.join(ARMS)})")
    return ARMS[name]


@lru_cache(maxsize=8)
def base_serve(profile: str) -> dict[str, Any]:
    from harness.serve.profiles import load_profile

    return dict(load_profile(profile).serve)


def pool_override(arm_name: str, pool_gib: float) -> str:
    """The serve override that sets the arm's host pool: HiSparse's `host_pool_gib` (the
    128 GiB indexer pool beside it stays as the profile has it), or the OffloadingConnector's
    `cpu_bytes_to_use` for an offloading arm. Both are per node here (TP ranks share it, DP1)."""
    a = arm(arm_name)
    if a.policy == "hisparse":
        value: dict[str, Any] = {"hisparse_config": {"host_pool_gib": _number(pool_gib)}}
        return f"serve.attention-config={json.dumps(value)}"
    kv = copy.deepcopy(base_serve(a.profile)["kv-transfer-config"])
    kv.setdefault("kv_connector_extra_config", {})["cpu_bytes_to_use"] = int(pool_gib * GIB)
    return f"serve.kv-transfer-config={json.dumps(kv)}"


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def server_overrides(
    config: Config, *, model_id: str, tp: int, max_num_seqs: int | None = None
) -> list[str]:
    """Profile overrides for the server of `config` (`max_num_seqs` replaces the configured
    value when the simulation may use an equivalent one, see search.py)."""
    mns = config.max_num_seqs if max_num_seqs is None else max_num_seqs
    return [
        f"model={model_id}",
        f"gpus={tp}",
        f"serve.tensor-parallel-size={tp}",
        f"serve.max-num-seqs={mns}",
        pool_override(config.arm, config.pool_gib),
    ]


def serve_command(config: Config, *, model_id: str, tp: int) -> str:
    """The `vllm serve` line the profile system renders for `config` (harness.serve)."""
    from harness.serve.profiles import load_profile, render_serve_command

    prof = load_profile(arm(config.arm).profile, server_overrides(config, model_id=model_id, tp=tp))
    return shlex.join(render_serve_command(prof))
