"""What a run records about its engine (`RunManifest.engine_spec`), and what an older manifest
that predates the field stands for (and the one key repro.run/1 named otherwise). Below every
stage: `harness.engines` validates `args` against the engine's typed model; this module only
knows the record."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import AliasChoices, BaseModel, BeforeValidator, ConfigDict, Field

# repro.run/1 manifests are read as repro.run/2 ones: the one change is that the configuration
# key (harness.identity.configuration_key) was stored as `workload_key`
RUN_1 = "repro.run/1"
RUN_1_AS_2 = BeforeValidator(lambda version: "repro.run/2" if version == RUN_1 else version)
CONFIG_KEY_NAMES = AliasChoices("configuration_key", "workload_key")


class EngineSpec(BaseModel):
    """Which engine ran a run and with what: `kind` is its name in `harness.engines`, `args` its
    typed arguments (validated there; what `--resume` relaunches with), `simulated` whether the
    times and tokens came from the simulator rather than a real server."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    simulated: bool = False
    args: dict[str, Any] = Field(default_factory=dict)


def _legacy_simulated(data: dict[str, Any]) -> EngineSpec:
    """A served simulation (`repro sweep --engine sim`) is the one that recorded a time scale;
    its extra `repro sim serve` arguments are in its launch provenance, its `--set sim.*` in
    the overrides. Without a time scale: `repro simulate` (the simulator in process)."""
    if data.get("time_scale") is None:
        return EngineSpec(kind="sim", simulated=True)
    launch = data.get("launch") or {}
    args = {
        "time_scale": data["time_scale"],
        "sim_args": list(launch.get("sim_args") or []),
        "overrides": [o for o in data.get("overrides") or [] if o.startswith("sim.")],
    }
    return EngineSpec(kind="sim-http", simulated=True, args=args)


# Manifests written before `engine_spec` existed named the engine in `engine` only: the record
# names the harness wrote then, and the EngineSpec each stands for (a frozen table: engines
# added since write `engine_spec` themselves).
_LEGACY_ENGINES: dict[str, Callable[[dict[str, Any]], EngineSpec]] = {
    "vllm": lambda data: EngineSpec(kind="vllm"),
    "url": lambda data: EngineSpec(kind="url", args={"url": data.get("base_url")}),
    "sim": _legacy_simulated,
}


def legacy_engine_spec(manifest: dict[str, Any]) -> EngineSpec | None:
    """The EngineSpec a manifest without one stands for (None: not a legacy engine name)."""
    derive = _LEGACY_ENGINES.get(str(manifest.get("engine")))
    return derive(manifest) if derive else None
