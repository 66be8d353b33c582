"""`sim-http`: the simulated engine served over HTTP (`repro sim serve`), launched and owned
like a vLLM server; `repro sweep --engine sim`. No GPUs, no real tokens."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, ValidationError

from harness.engines.base import Engine, EngineArgs, EngineOption, Server, StartContext
from harness.errors import ConfigError
from harness.serve.profiles import Profile
from harness.sim.serve.interval import served_interval80
from harness.sim.serve.process import SimServer
from harness.sim.serve.server import DEFAULT_TIME_SCALE, sim_dataset_for


class SimHttpArgs(EngineArgs):
    kind: Literal["sim-http"] = "sim-http"
    time_scale: float = Field(DEFAULT_TIME_SCALE, gt=0)  # virtual time K x the wall clock
    sim_args: list[str] = Field(default_factory=list)  # extra `repro sim serve` arguments
    overrides: list[str] = Field(default_factory=list)  # --set sim.PARAM=VALUE


class SimHttpEngine(Engine):
    kind = "sim-http"
    record_name = "sim"
    args_model = SimHttpArgs
    cli_name = "sim"
    simulated = True
    judges_replies = False
    machine_preflight = False
    needs_gpus = False

    options = (
        EngineOption(
            "time_scale",
            "--time-scale",
            float,
            "virtual time runs K x faster than the wall clock; client times are multiplied "
            f"back by K [default: {DEFAULT_TIME_SCALE:g}].",
            metavar="K",
        ),
        EngineOption(
            "sim_args",
            "--sim-arg",
            str,
            "extra `repro sim serve` argument, e.g. --sim-arg=--fail-rate=0.01.",
            multiple=True,
            metavar="ARG",
        ),
        EngineOption(
            "sim_overrides",
            "--set",
            str,
            "a simulator parameter.",
            multiple=True,
            set_prefix="sim.",
        ),
    )

    def args_from_options(self, values: Mapping[str, Any]) -> EngineArgs:
        time_scale = values.get("time_scale", DEFAULT_TIME_SCALE)
        if isinstance(time_scale, int | float) and not time_scale > 0:
            raise ConfigError(f"--time-scale {time_scale!r}: must be > 0")
        fields = {
            "time_scale": time_scale,
            "sim_args": list(values.get("sim_args", ())),
            "overrides": list(values.get("sim_overrides", ())),
        }
        try:
            return SimHttpArgs.model_validate(fields)
        except ValidationError as exc:
            raise self.invalid(exc) from None

    def default_dataset(self, profile: Profile) -> str:
        # the GLM recipes need the hub's tokenizer; the simulated engine runs offline
        return sim_dataset_for(profile.sweep.dataset)

    def time_scale(self, args: EngineArgs) -> float | None:
        assert isinstance(args, SimHttpArgs)
        return args.time_scale

    def interval80(self, server: Server, metrics: Mapping[str, Any]) -> dict[str, list[float]]:
        assert isinstance(server, SimServer)
        return served_interval80(server, metrics)

    def start(self, profile: Profile, args: EngineArgs, ctx: StartContext) -> Server:
        assert isinstance(args, SimHttpArgs)
        ctx.echo(
            f"starting the simulated engine for profile {profile.name} "
            f"(time scale {args.time_scale}); log: {ctx.log_path}"
        )
        server = SimServer(
            profile,
            log_path=ctx.log_path,
            port=ctx.port,
            echo=ctx.echo,
            time_scale=args.time_scale,
            dataset=ctx.dataset,
            extra_args=args.sim_args,
            overrides=args.overrides,
        )
        server.start()
        ctx.echo(f"sim server ready at {server.base_url}")
        return server
