"""`sim`: the simulator in process, no HTTP (`repro simulate`): the engine and its own client
run in virtual time and write the run records directly (`harness.sim.run`)."""

from __future__ import annotations

from typing import Literal

from harness.engines.base import Engine, EngineArgs, Server, StartContext
from harness.errors import ConfigError
from harness.serve.profiles import Profile


class SimArgs(EngineArgs):
    kind: Literal["sim"] = "sim"  # the calibration and overrides are in the run's build record


class SimEngine(Engine):
    kind = "sim"
    record_name = "sim"
    args_model = SimArgs
    simulated = True
    judges_replies = False
    machine_preflight = False
    needs_gpus = False
    served = False

    def start(self, profile: Profile, args: EngineArgs, ctx: StartContext) -> Server:
        raise ConfigError(
            "engine sim runs in process, without a server: use `repro simulate` "
            "(or `repro sweep --engine sim` for the simulated server)"
        )
