"""The engine interface: what the sweep needs from whatever serves (or simulates) the model.

An `Engine` is stateless and registered once (`harness.engines.registry`); it declares the
command-line options it accepts (`EngineOption`) and turns the ones given into its typed
`EngineArgs`, checks what can fail before a run directory exists, starts (or attaches to) a
`Server`, and says how the run must treat it (restart it when it dies? judge its replies? does
it need GPUs?). The sweep asks these questions instead of comparing names, so a new engine is
one module and one `register` call (docs/engines.md §4).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

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
    def metrics_url(self) -> str:
        """The Prometheus endpoint the scraper polls during a point."""
        ...

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
class EngineOption:
    """One `repro sweep` option an engine accepts (docs/engines.md §3).

    `name` is its key among the options a sweep is given (click's parameter name, and a keyword
    of `SweepRequest`); `flag` is what the user types. With `multiple` it repeats and its value
    is a sequence. `set_prefix`: it is no flag of its own but the `--set` items that start with
    the prefix (`--set sim.PARAM=VALUE`). `selects`: given with the default `--engine`, it
    chooses the engine that declares it (`--url` attaches instead of launching)."""

    name: str
    flag: str
    value_type: type[str | float | int]
    help: str
    multiple: bool = False
    metavar: str | None = None
    set_prefix: str | None = None
    selects: bool = False

    @property
    def shown(self) -> str:
        """The option as the user writes it (for errors)."""
        return f"--set {self.set_prefix}PARAM=VALUE" if self.set_prefix else self.flag


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

    options: ClassVar[tuple[EngineOption, ...]] = ()  # the `repro sweep` options it accepts

    def args_from_options(self, values: Mapping[str, Any]) -> EngineArgs:
        """The typed arguments for the options given, by name. Only this engine's own options
        arrive here: the registry refuses any other before. The default passes them to
        `args_model` field by field (an invalid value is a ConfigError naming its flag)."""
        try:
            return self.args_model.model_validate({**values, "kind": self.kind})
        except ValidationError as exc:
            raise self.invalid(exc) from None

    def invalid(self, exc: ValidationError) -> ConfigError:
        """A one-line error for the first invalid option value (its flag, the value, why)."""
        error = exc.errors()[0]
        name = str(error["loc"][0]) if error["loc"] else self.kind
        flag = next((o.shown for o in self.options if o.name == name), name)
        value = error.get("input")
        shown = "" if isinstance(value, dict) else f" {value!r}"
        return ConfigError(f"{flag}{shown}: {error['msg']} (engine {self.kind})")

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

    def interval80(self, server: Server, metrics: Mapping[str, Any]) -> dict[str, list[float]]:
        """The engine's own 80 % prediction interval of a served point's headline metrics,
        written as the point's `fidelity.interval80` (empty: the engine predicts nothing)."""
        return {}

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
