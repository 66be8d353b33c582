"""The engine interface: what the sweep needs from whatever serves (or simulates) the model.

An `Engine` is stateless and registered once (`harness.engines.registry`); it turns the
command line's engine options into its typed `EngineArgs`, checks what can fail before a run
directory exists, starts (or attaches to) a `Server`, and says how the run must treat it
(restart it when it dies? judge its replies? does it need GPUs?). The sweep asks these
questions instead of comparing names, so a new engine is one module and one `register` call.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict

from harness.engine_spec import EngineSpec
from harness.errors import ConfigError, ServerError
from harness.serve.profiles import Profile
from harness.serve.server import port_is_free, require_gpus

Echo = Callable[[str], None]


class Server(Protocol):
    """What the run layer needs from a server, whoever runs it."""

    command: list[str]

    @property
    def base_url(self) -> str: ...

    @property
    def served_model_name(self) -> str: ...

    def alive(self) -> bool: ...

    def stop(self) -> None: ...

    def restart(self) -> None: ...

    def provenance(self) -> dict[str, Any]: ...


class EngineArgs(BaseModel):
    """An engine's typed arguments; each engine subclasses it with a fixed `kind`. Stored whole
    in the manifest (`engine_spec`) and read back from there on `--resume`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str


@dataclass(frozen=True)
class EngineOptions:
    """The engine options a sweep was given on the command line (each engine accepts some)."""

    url: str | None = None  # --url
    time_scale: float | None = None  # --time-scale
    sim_args: tuple[str, ...] = ()  # --sim-arg
    sim_overrides: tuple[str, ...] = ()  # --set sim.PARAM=VALUE

    def reject_sim_options(self) -> None:
        """The error of an engine that accepts none of the simulated server's options."""
        if self.time_scale is not None or self.sim_args:
            raise ConfigError("--time-scale and --sim-arg apply to --engine sim only")
        if self.sim_overrides:
            raise ConfigError("--set sim.PARAM=VALUE applies to --engine sim only")


@dataclass(frozen=True)
class StartContext:
    """Where and how to start: the run's server log, port, resolved dataset and output."""

    log_path: Path
    port: int | None
    dataset: str
    echo: Echo


class Engine(ABC):
    """One engine. Class attributes say how a run treats it; methods do the engine's work."""

    kind: ClassVar[str]  # the registry name: vllm | url | sim-http | sim | a plug-in's
    record_name: ClassVar[str]  # RunManifest.engine (the name runs recorded before engine_spec)
    args_model: ClassVar[type[EngineArgs]]
    cli_name: ClassVar[str | None] = None  # its value of `repro sweep --engine` (None: not one)
    launches: ClassVar[bool] = True  # owns its server: stops it at the end, restarts it if dead
    simulated: ClassVar[bool] = False  # times and tokens come from the simulator
    judges_replies: ClassVar[bool] = True  # emits real tokens: the coherence check applies
    machine_preflight: ClassVar[bool] = True  # the doctor's RAM/disk/build/hub checks apply
    needs_gpus: ClassVar[bool] = True
    served: ClassVar[bool] = True  # reached over HTTP by the client (False: in process)

    def args_from_options(self, options: EngineOptions) -> EngineArgs:
        """The typed arguments for these options, or a ConfigError naming the one it refuses.
        The default accepts no option at all."""
        options.reject_sim_options()
        if options.url:
            raise ConfigError(
                f"--engine {self.cli_name or self.kind} launches a server; --url attaches to one"
            )
        return self.args_model(kind=self.kind)

    def args_from_spec(self, spec: EngineSpec) -> EngineArgs:
        """The typed arguments a run recorded (its manifest's engine_spec)."""
        try:
            return self.args_model.model_validate({**spec.args, "kind": self.kind})
        except ValueError as exc:
            raise ConfigError(f"engine_spec of kind {self.kind!r}: {exc}") from None

    def spec(self, args: EngineArgs) -> EngineSpec:
        """What the manifest records about the engine."""
        return EngineSpec(
            kind=self.kind, simulated=self.simulated, args=args.model_dump(exclude={"kind"})
        )

    def default_dataset(self, profile: Profile) -> str:
        return profile.sweep.dataset

    def time_scale(self, args: EngineArgs) -> float | None:
        """Virtual time runs K x faster than the wall clock (None: real time)."""
        return None

    def attached_url(self, args: EngineArgs) -> str | None:
        """The URL of a server someone else runs (None: the engine launches its own)."""
        return None

    def check_before_run(self, profile: Profile, args: EngineArgs, port: int | None) -> None:
        """Everything that can fail before a run directory is created (port, GPUs)."""
        use_port = port or profile.port
        if not port_is_free(profile.host, use_port):
            raise ServerError(
                f"port {use_port} on {profile.host} is busy; pick another with --port, "
                "or stop what is listening there"
            )
        if self.needs_gpus:
            require_gpus(profile)

    @abstractmethod
    def start(self, profile: Profile, args: EngineArgs, ctx: StartContext) -> Server:
        """Start (or attach to) the server and wait until it is ready."""
