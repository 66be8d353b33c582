"""The run configuration: everything a run was configured with, resolved once, stored whole in
the manifest (``run_config``, schema ``repro.runconfig/1``) and read back by ``--resume``
(docs/workloads.md §2).

Its parts: the engine (its typed arguments), the server (the resolved profile but its sweep,
and the ``--set`` overrides), the workload (its name, its digest and the fields the client
sends), the client (dataset, scrape and pacing settings, repeats, points, port), the coherence
check (the profile's block and ``--coherence-against``), the gates (``--fail-fast``,
``--allow-incoherent``, the objectives) and the environment variables that were set. A manifest
written before the field existed has it derived from its other fields when read
(:func:`run_config`); its file is never rewritten.

Written by ``repro sweep`` and ``repro simulate``; read by ``--resume`` (:func:`run_config`,
strictly) and by ``report``, ``regress``, ``export`` and ``claims`` through
:func:`readable_config` and the ``configured_*`` readers, which also read a record too partial
to derive one from (hand-made or truncated manifests), as having no objectives or think time.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.config import validation_message
from harness.dataset.thinktime import NO_THINK_TIME, ThinkTime
from harness.engine_spec import EngineSpec
from harness.errors import RunError
from harness.results import Run, RunManifest
from harness.serve.profiles import RUNNER_FIELDS, Profile
from harness.serve.workloads import (
    WORKLOAD_FIELDS,
    WorkloadFields,
    WorkloadSpec,
    workload_digest,
)

RUN_CONFIG_SCHEMA = "repro.runconfig/1"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServerConfig(_Strict):
    """The resolved profile without its sweep (that is the workload's and the client's)."""

    profile_name: str
    profile: dict[str, Any]
    overrides: list[str] = Field(default_factory=list)  # --set KEY=VALUE, as given


class WorkloadConfig(_Strict):
    """What the client sends: the workload file's fields after ``--set sweep.*``."""

    name: str | None  # as the profile named it (None: a manifest older than workload files)
    digest: str  # harness.serve.workloads.workload_digest of `fields`
    fields: dict[str, Any]


class ClientConfig(_Strict):
    """How the harness drives the client: the dataset and the profile's runner settings."""

    dataset: str  # the profile's dataset recipe
    # what the run asked for: --dataset, else the engine's choice for the profile (the
    # manifest's `dataset` says what was built from it)
    dataset_spec: str
    scrape_interval_s: float
    point_timeout_s: float
    sleep_between_points_s: float
    warmup_requests: int
    repeats: int = 1
    only_points: list[str] | None = None  # --points
    port: int | None = None  # --port


class CoherenceConfig(_Strict):
    check: dict[str, Any] | None = None  # the profile's coherence block (None: no check)
    against: str | None = None  # --coherence-against


class GateConfig(_Strict):
    fail_fast: bool = False
    allow_incoherent: bool = False
    slo: str | None = None  # the workload's latency objectives, for goodput


class RunConfig(_Strict):
    schema_version: Literal["repro.runconfig/1"] = "repro.runconfig/1"
    engine: EngineSpec
    server: ServerConfig
    workload: WorkloadConfig
    client: ClientConfig
    coherence: CoherenceConfig
    gates: GateConfig
    # the variables of harness.env's table that were set (docs/workloads.md §4; older: none)
    environment: dict[str, str] = Field(default_factory=dict)

    def client_workload(self) -> WorkloadFields:
        """What the client sent, typed (points, think time, objectives, ...)."""
        return WorkloadFields.model_validate(self.workload.fields)

    def profile(self) -> Profile:
        """The resolved profile again: the server's fields, the sweep rebuilt from the workload
        and the client's runner settings."""
        runner = self.client.model_dump(include=set(RUNNER_FIELDS))
        sweep = {**self.workload.fields, **runner}
        return Profile.model_validate({**self.server.profile, "sweep": sweep})


def build_run_config(
    *,
    engine: EngineSpec,
    profile: Profile,
    overrides: list[str],
    dataset: str | None = None,
    repeats: int = 1,
    only_points: list[str] | None = None,
    port: int | None = None,
    coherence_against: str | None = None,
    fail_fast: bool = False,
    allow_incoherent: bool = False,
    environment: dict[str, str] | None = None,
) -> RunConfig:
    """The run configuration of a resolved profile and the command line's choices."""
    sweep = profile.sweep.model_dump(mode="json")
    fields = {k: sweep[k] for k in WORKLOAD_FIELDS}
    server = profile.model_dump(mode="json", exclude={"sweep"})
    return RunConfig(
        engine=engine,
        server=ServerConfig(profile_name=profile.name, profile=server, overrides=overrides),
        workload=WorkloadConfig(
            name=profile.workload,
            digest=workload_digest(WorkloadSpec.model_validate(fields)),
            fields=fields,
        ),
        client=ClientConfig(
            **{k: sweep[k] for k in RUNNER_FIELDS},
            dataset_spec=dataset or profile.sweep.dataset,
            repeats=repeats,
            only_points=list(only_points) if only_points else None,
            port=port,
        ),
        coherence=CoherenceConfig(
            check=server.get("coherence"),
            against=coherence_against,
        ),
        gates=GateConfig(
            fail_fast=fail_fast, allow_incoherent=allow_incoherent, slo=profile.sweep.slo
        ),
        environment=environment or {},
    )


def run_config(manifest: RunManifest, source: str = "manifest.json") -> RunConfig:
    """The manifest's run configuration: as stored (validated strictly), or derived from the
    fields an older manifest has."""
    if manifest.run_config is not None:
        try:
            return RunConfig.model_validate(manifest.run_config)
        except ValidationError as exc:
            raise RunError(validation_message(source, exc, prefix="run_config")) from None
    return _derived(manifest, source)


def _derived(manifest: RunManifest, source: str) -> RunConfig:
    engine = manifest.engine_record()
    if engine is None:
        raise RunError(f"{source}: engine {manifest.engine!r} is not known")
    data = {**manifest.profile, "sweep": manifest.sweep}
    try:
        profile = Profile.model_validate(data)
    except ValidationError as exc:
        raise RunError(validation_message(source, exc, prefix="profile")) from None
    return build_run_config(
        engine=engine,
        profile=profile,
        overrides=list(manifest.overrides),
        dataset=str(manifest.dataset.get("spec") or profile.sweep.dataset),
        repeats=manifest.repeats,
        coherence_against=manifest.coherence_against,
    )


# --------------------------------------------------------------------------- readers


def readable_config(manifest: RunManifest, source: str = "manifest.json") -> RunConfig | None:
    """The run configuration for the readers of finished runs: as stored (a stored one that
    does not validate is an error, as for ``--resume``), else derived; None for an older
    manifest without what one is derived from (its profile or sweep only partly recorded)."""
    if manifest.run_config is not None:
        return run_config(manifest, source)
    try:
        return _derived(manifest, source)
    except RunError:
        return None


def _source(run: Run) -> str:
    return str(run.root / "manifest.json")


def _readable(run: Run) -> RunConfig | None:
    return readable_config(run.manifest, _source(run))


def configured_objectives(run: Run) -> str | None:
    """The latency objectives the run was configured with (the workload's `slo`)."""
    config = _readable(run)
    return config.gates.slo if config else None


def configured_think_time(run: Run) -> ThinkTime:
    """The pauses the client made between turns (none for a record without a configuration)."""
    config = _readable(run)
    return config.client_workload().think_time if config else NO_THINK_TIME


def configured_sweep(run: Run) -> dict[str, Any]:
    """The resolved sweep (the workload's fields and the runner's settings), for display; a
    manifest older than the stored configuration shows its `sweep` as written (a derived one
    would add the fields introduced since, with their defaults)."""
    if run.manifest.run_config is None:
        return run.manifest.sweep
    return run_config(run.manifest, _source(run)).profile().sweep.model_dump(mode="json")


def configured_gpus(run: Run) -> int:
    """The profile's GPU count, 0 for a CPU profile (the manifest's `gpus` is the per-GPU
    divisor, never below 1)."""
    config = _readable(run)
    if config is not None:
        return config.profile().gpus
    return int(run.manifest.profile.get("gpus", run.manifest.gpus) or 0)
