"""The run configuration, as the run stage names it: the model lives in
:mod:`harness.serve.run_config` (below the simulator, whose offline runs record it too)."""

from harness.serve.run_config import (
    RUN_CONFIG_SCHEMA,
    ClientConfig,
    CoherenceConfig,
    GateConfig,
    RunConfig,
    ServerConfig,
    WorkloadConfig,
    build_run_config,
    configured_gpus,
    configured_objectives,
    configured_sweep,
    configured_think_time,
    readable_config,
    run_config,
)

__all__ = [
    "RUN_CONFIG_SCHEMA",
    "ClientConfig",
    "CoherenceConfig",
    "GateConfig",
    "RunConfig",
    "ServerConfig",
    "WorkloadConfig",
    "build_run_config",
    "configured_gpus",
    "configured_objectives",
    "configured_sweep",
    "configured_think_time",
    "readable_config",
    "run_config",
]
