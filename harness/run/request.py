"""What a sweep was asked to do (`SweepRequest`) and what that resolves to on the file system
(`Target`): a new run, or a resumable one checked before anything is written."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from harness.errors import ConfigError, RunError
from harness.paths import results_dir
from harness.results import PointRecord, RunLayout, RunManifest, read_manifest, read_point
from harness.run.engine import ENGINES
from harness.run.owner import owner_state
from harness.serve.profiles import Profile, load_profile
from harness.serve.watchdog import group_alive

# One safe path component: no separators, no leading dot, no shell or HTML metacharacters.
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")


@dataclass(frozen=True)
class SweepRequest:
    """Everything `repro sweep` was asked to do (`profile` is a name, a YAML path or a Profile)."""

    profile: str | Profile | None = None
    overrides: Sequence[str] = ()
    dataset: str | None = None
    url: str | None = None
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
    engine: str = "vllm"  # vllm | sim (the simulated engine over HTTP)
    time_scale: float | None = None  # engine sim: virtual time K x faster than the wall clock
    sim_args: Sequence[str] = ()  # engine sim: extra `repro sim serve` arguments (faults, ...)

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ConfigError(f"--engine {self.engine!r}: expected one of {', '.join(ENGINES)}")
        if self.engine != "sim" and (self.time_scale is not None or self.sim_args):
            raise ConfigError("--time-scale and --sim-arg apply to --engine sim only")
        if self.engine == "sim" and self.url:
            raise ConfigError("--engine sim launches the simulated server; --url attaches to one")
        if self.time_scale is not None and not self.time_scale > 0:
            raise ConfigError(f"--time-scale {self.time_scale!r}: must be > 0")
        if self.run_id is not None and not RUN_ID.fullmatch(self.run_id):
            raise ConfigError(
                f"--run-id {self.run_id!r}: a run id is one path component of letters, digits "
                "and . _ + - (not starting with . or -), at most 128 characters"
            )
        if self.repeats < 1:
            raise ConfigError(f"--repeats must be >= 1, got {self.repeats}")


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
    engine: str = "vllm"
    time_scale: float = 1.0
    sim_args: list[str] = field(default_factory=list)


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
    run_dir = Path(request.resume)  # type: ignore[arg-type]
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
    url = manifest.base_url if manifest.engine == "url" else None
    port = request.port
    if url is None and port is None:  # relaunch where the run's server was
        port = urlparse(manifest.base_url).port
    pgid = manifest.owner.get("server_pgid") if manifest.status == "running" else None
    return Target(
        profile=Profile.model_validate(manifest.profile),
        overrides=list(manifest.overrides),
        url=url,
        port=port,
        repeats=manifest.repeats,
        dataset_spec=str(manifest.dataset.get("path")),
        run_dir=run_dir,
        manifest=manifest,
        stale_server_pgid=int(pgid) if pgid and group_alive(int(pgid)) else None,
        engine="sim" if manifest.engine == "sim" else "vllm",
        time_scale=manifest.time_scale or 1.0,
        sim_args=list((manifest.launch or {}).get("sim_args") or []),
    )


def resolve(request: SweepRequest) -> Target:
    if request.resume is not None:
        return _resolve_resume(request)
    if request.profile is None:
        raise ConfigError("a sweep needs --profile (or --resume RUN_DIR)")
    profile_sets = [o for o in request.overrides if not o.startswith("sim.")]
    if request.engine != "sim" and len(profile_sets) != len(request.overrides):
        raise ConfigError("--set sim.PARAM=VALUE applies to --engine sim only")
    prof = _load_profile(request.profile, profile_sets)
    rid = request.run_id or f"{prof.name}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    run_dir = Path(request.out or results_dir()) / rid
    if request.run_id and run_dir.exists() and not request.dry_run:
        raise RunError(
            f"{run_dir}: already exists; a run is never overwritten "
            "(use --resume to continue it, or another --run-id)"
        )
    return Target(
        profile=prof,
        overrides=list(request.overrides),
        url=request.url,
        port=request.port,
        repeats=request.repeats,
        dataset_spec=str(request.dataset or _default_dataset(prof, request.engine)),
        run_dir=run_dir,
        explicit_id=bool(request.run_id),
        engine=request.engine,
        time_scale=float(request.time_scale or _default_time_scale(request.engine)),
        sim_args=list(request.sim_args),
    )


def _default_dataset(prof: Profile, engine: str) -> str:
    if engine == "sim":  # the GLM recipes need the hub's tokenizer; the sim runs offline
        from harness.sim.serve.server import sim_dataset_for

        return sim_dataset_for(prof.sweep.dataset)
    return prof.sweep.dataset


def _default_time_scale(engine: str) -> float:
    if engine != "sim":
        return 1.0
    from harness.sim.serve.server import DEFAULT_TIME_SCALE

    return DEFAULT_TIME_SCALE
