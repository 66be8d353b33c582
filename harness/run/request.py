"""What a sweep was asked to do (`SweepRequest`) and what that resolves to on the file system
(`Target`): a new run, or a resumable one checked before anything is written."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from harness import engines
from harness import env as harness_env
from harness.engines import Engine, EngineArgs
from harness.errors import ConfigError, RunError
from harness.names import check_name
from harness.paths import results_dir
from harness.results import PointRecord, RunLayout, RunManifest, read_manifest, read_point
from harness.run.config import RunConfig, build_run_config, run_config
from harness.run.owner import owner_state
from harness.serve.profiles import Profile, load_profile
from harness.serve.watchdog import group_alive


@dataclass(frozen=True)
class _SweepFields:
    """Everything `repro sweep` was asked to do (`profile` is a name, a YAML path or a Profile).
    `engine_options` holds the engine options given, by name (each engine declares its own:
    docs/engines.md §3); `SweepRequest` also takes them as keywords."""

    profile: str | Profile | None = None
    overrides: Sequence[str] = ()
    dataset: str | None = None
    out: Path | None = None
    run_id: str | None = None
    resume: Path | None = None
    dry_run: bool = False
    fail_fast: bool = False
    repeats: int = 1
    only_points: Sequence[str] | None = None
    port: int | None = None
    allow_incoherent: bool = False  # count the points even when the coherence check fails
    coherence_against: str | None = None  # a run dir or an arm, instead of the profile's reference
    engine: str = engines.DEFAULT_CLI  # `--engine`: a registered engine's cli_name
    engine_options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "engine_options", engines.given_options(self.engine_options))
        self.engine_choice()  # which options go with which engine: the registry's one check
        if self.run_id is not None:  # the one gate for names (harness/names.py)
            check_name(self.run_id, "--run-id")
        if self.repeats < 1:
            raise ConfigError(f"--repeats must be >= 1, got {self.repeats}")

    def engine_choice(self) -> tuple[Engine, EngineArgs]:
        """The engine this request names and its typed arguments (a ConfigError otherwise)."""
        _profile_sets, engine_sets = engines.split_overrides(self.overrides)
        return engines.resolve_options(self.engine, {**self.engine_options, **engine_sets})

    @property
    def attached_url(self) -> str | None:
        """The URL of the server the request attaches to (None: its engine launches one)."""
        engine, args = self.engine_choice()
        return engine.attached_url(args)


class SweepRequest(_SweepFields):
    """A sweep's request. Keywords that are not fields are engine options by name
    (`SweepRequest("cpu-tiny", url=...)`), checked against what the chosen engine declares."""

    def __init__(self, *args: Any, engine_options: Mapping[str, Any] | None = None, **kw: Any):
        fields = {k: kw.pop(k) for k in list(kw) if k in _FIELD_NAMES}
        fields["engine_options"] = {**(engine_options or {}), **kw}
        super().__init__(*args, **fields)


_FIELD_NAMES = {f.name for f in dataclasses.fields(_SweepFields)}


@dataclass
class Target:
    """A request resolved against the file system: what will run, where."""

    profile: Profile
    overrides: list[str]
    url: str | None
    port: int | None
    repeats: int
    dataset_spec: str
    run_dir: Path
    explicit_id: bool = False  # --run-id given: never add a suffix
    manifest: RunManifest | None = None  # set when resuming
    stale_server_pgid: int | None = None
    engine: Engine = field(default_factory=lambda: engines.by_cli_name(engines.DEFAULT_CLI))
    engine_args: EngineArgs = field(
        default_factory=lambda: engines.by_cli_name(engines.DEFAULT_CLI).args_from_options({})
    )
    config: RunConfig | None = None  # resolved once (new run) or read back (resume)

    @property
    def time_scale(self) -> float:
        """Virtual seconds per wall-clock second (1: real time)."""
        return self.engine.time_scale(self.engine_args) or 1.0


# --------------------------------------------------------------------------- resolve


def finished_points(layout: RunLayout) -> dict[str, PointRecord]:
    """Every finished point of a run; a corrupt point.json is an error naming the file."""
    done = {}
    for path in sorted(layout.points_dir.glob("*/point.json")):
        record = read_point(path)
        done[record.point_id] = record
    return done


def _load_profile(profile: str | Profile, overrides: Sequence[str]) -> Profile:
    if isinstance(profile, Profile):
        return load_profile(str(profile.source), overrides) if overrides else profile
    return load_profile(str(profile), overrides)


def _resolve_resume(request: SweepRequest) -> Target:
    """Check that RUN can resume, writing nothing: a refusal leaves the run as it was."""
    run_dir = Path(request.resume)  # type: ignore[arg-type]  # resolve() checked it is set
    manifest = read_manifest(run_dir)
    if manifest.status == "complete":
        raise RunError(f"{run_dir}: run is complete; a finished run is never overwritten")
    given = request.profile
    given = getattr(given, "name", given)
    if given is not None and manifest.profile_name not in (given, Path(str(given)).stem):
        raise RunError(
            f"{run_dir}: the run used profile {manifest.profile_name!r}, not "
            f"{given!r}; --resume takes the run's own profile (omit --profile)"
        )
    state = owner_state(manifest.owner)
    if manifest.status == "running" and state in ("alive", "elsewhere"):
        where = manifest.owner.get("host")
        raise RunError(
            f"{run_dir}: still being run by pid {manifest.owner.get('pid')} on {where}; "
            "stop it first (Ctrl-C or kill), then --resume"
        )
    finished_points(RunLayout(run_dir))  # every finished point must be readable
    config = run_config(manifest, str(run_dir / "manifest.json"))
    engine = engines.get(config.engine.kind)
    engine_args = engine.args_from_spec(config.engine)
    url = engine.attached_url(engine_args)
    port = request.port
    if url is None and port is None:  # relaunch where the run's server was
        port = urlparse(manifest.base_url).port
    pgid = manifest.owner.get("server_pgid") if manifest.status == "running" else None
    return Target(
        profile=config.profile(),
        overrides=list(config.server.overrides),
        url=url,
        port=port,
        repeats=config.client.repeats,
        dataset_spec=str(manifest.dataset.get("path")),
        run_dir=run_dir,
        manifest=manifest,
        stale_server_pgid=int(pgid) if pgid and group_alive(int(pgid)) else None,
        engine=engine,
        engine_args=engine_args,
        config=config,
    )


def resolve(request: SweepRequest) -> Target:
    if request.resume is not None:
        return _resolve_resume(request)
    if request.profile is None:
        raise ConfigError("a sweep needs --profile (or --resume RUN_DIR)")
    engine, engine_args = request.engine_choice()
    profile_sets, _engine_sets = engines.split_overrides(request.overrides)
    prof = _load_profile(request.profile, profile_sets)
    rid = request.run_id or f"{prof.name}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    run_dir = Path(request.out or results_dir()) / rid
    if request.run_id and run_dir.exists() and not request.dry_run:
        raise RunError(
            f"{run_dir}: already exists; a run is never overwritten "
            "(use --resume to continue it, or another --run-id)"
        )
    dataset = str(request.dataset or engine.default_dataset(prof))
    config = build_run_config(
        engine=engine.spec(engine_args),
        profile=prof,
        overrides=list(request.overrides),
        dataset=dataset,
        repeats=request.repeats,
        only_points=list(request.only_points) if request.only_points else None,
        port=request.port,
        coherence_against=request.coherence_against,
        fail_fast=request.fail_fast,
        allow_incoherent=request.allow_incoherent,
        environment=harness_env.snapshot(),
    )
    return Target(
        profile=prof,
        overrides=list(request.overrides),
        url=engine.attached_url(engine_args),
        port=request.port,
        repeats=request.repeats,
        dataset_spec=dataset,
        run_dir=run_dir,
        explicit_id=bool(request.run_id),
        engine=engine,
        engine_args=engine_args,
        config=config,
    )
