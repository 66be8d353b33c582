"""The submitter's record of a run's job, and collecting Slurm's final word into the run.

`OUT/.slurm/<run-id>.job.json` is written at submission, before the job exists on a node, so a
job that never writes its run directory (queued, cancelled while queued, killed at start) is
still visible: `repro runs list` shows it, never a silent hole. When the job has ended,
`collect` writes Slurm's final state and reason into the run's manifest (`manifest.job`) and
settles the run's status: a job Slurm killed (time limit, node failure, ...) leaves the run
`failed` with Slurm's reason; a cancelled one leaves it `partial`, resumable with `--resume`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict

from harness.cluster.slurm import (
    KILLED_BY_SLURM,
    SlurmError,
    SlurmState,
    current_job_id,
    have_slurm,
    job_state,
)
from harness.errors import RunError
from harness.results import JobFacts, RunManifest, atomic_write_json, read_manifest

JOB_SCHEMA: Final = "repro.job/1"
RECORDS_DIR = ".slurm"


class JobRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal["repro.job/1"] = JOB_SCHEMA
    run_id: str
    run_dir: str
    profile: str
    command: list[str]  # the `repro sweep` the job runs on its node
    folder: str  # submitit's folder: submission script, pickles, logs
    job: JobFacts  # the latest job of this run, as last seen
    collected: bool = False  # Slurm's final state is written into the run's manifest


def record_path(out: Path, run_id: str) -> Path:
    return Path(out) / RECORDS_DIR / f"{run_id}.job.json"


def read_record(path: Path) -> JobRecord:
    try:
        return JobRecord.model_validate_json(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunError(f"{path}: missing") from None
    except ValueError as exc:
        raise RunError(f"{path}: not a {JOB_SCHEMA} job record ({exc})") from None


def write_record(path: Path, record: JobRecord) -> None:
    atomic_write_json(path, record)


def _describe(state: SlurmState | None, job_id: str) -> tuple[str, str | None]:
    if state is None:
        return "UNKNOWN", (
            f"Slurm no longer knows job {job_id} (ended before its state was collected, "
            "and there is no accounting database)"
        )
    reason = state.reason
    if reason is None and state.state == "CANCELLED":
        reason = "cancelled (scancel)"
    if reason is None and state.state == "FAILED" and state.exit_code:
        reason = f"job exited with {state.exit_code}"
    return state.state, reason


def _settle(manifest: RunManifest, facts: JobFacts) -> None:
    """The run's status once its job has ended."""
    state = facts.state
    if state in KILLED_BY_SLURM or state == "UNKNOWN":
        if manifest.status != "complete":
            manifest.status = "failed"
    elif manifest.status == "running":  # the sweep was killed before it wrote its status
        manifest.status = "partial" if state == "CANCELLED" else "failed"
    if state != "COMPLETED":
        manifest.notes.append(f"slurm job {facts.job_id}: {state} ({facts.reason or '-'})")
    if manifest.finished_at is None:
        manifest.finished_at = facts.ended_at


def merge_facts(manifest: RunManifest, facts: JobFacts) -> None:
    """Put `facts` in the manifest; an earlier job of the run goes to previous_job_ids."""
    old = manifest.job
    if old is not None and old.job_id != facts.job_id:
        facts.previous_job_ids = [*old.previous_job_ids, old.job_id]
    elif old is not None:
        facts.previous_job_ids = list(old.previous_job_ids)
    manifest.job = facts


def collect(path: Path) -> JobRecord:
    """Refresh a job record from Slurm; when the job has ended, settle the run (once)."""
    record = read_record(path)
    if record.collected or not have_slurm():
        return record
    try:
        state = job_state(record.job.job_id)
    except SlurmError:
        return record  # Slurm unreachable now: collect later
    facts = record.job.model_copy()
    if state is not None:
        facts.node = state.node or facts.node
        facts.partition = state.partition or facts.partition
        facts.exit_code = state.exit_code
    if state is not None and not state.terminal:
        facts.state, facts.reason = state.state, state.reason
        record.job = facts
        write_record(path, record)
        return record
    facts.state, facts.reason = _describe(state, record.job.job_id)
    facts.ended_at = facts.ended_at or time.time()
    run_dir = Path(record.run_dir)
    if (run_dir / "manifest.json").is_file():
        manifest = read_manifest(run_dir)
        in_job = manifest.job
        if in_job is not None and in_job.job_id == facts.job_id:
            facts.node = facts.node or in_job.node
            facts.array_index = in_job.array_index
        merge_facts(manifest, facts)
        _settle(manifest, facts)
        atomic_write_json(run_dir / "manifest.json", manifest)
    record.job, record.collected = facts, True
    write_record(path, record)
    return record


def collect_all(out: Path) -> dict[str, JobRecord]:
    """Every job record under OUT, refreshed; keyed by run id. Unreadable records are skipped
    here (`repro runs list` names them)."""
    records: dict[str, JobRecord] = {}
    for path in sorted((Path(out) / RECORDS_DIR).glob("*.job.json")):
        try:
            record = collect(path)
        except RunError:
            continue
        records[record.run_id] = record
    return records


def new_facts(job_id: str, *, partition: str | None, log: str | None) -> JobFacts:
    array_index = int(job_id.split("_", 1)[1]) if "_" in job_id else None
    return JobFacts(
        job_id=job_id,
        array_index=array_index,
        partition=partition,
        state="PENDING",
        submitted_at=time.time(),
        log=log,
    )


def run_record(run_dir: Path) -> Path | None:
    path = record_path(Path(run_dir).parent, Path(run_dir).name)
    return path if path.is_file() else None


def settle_job_run(run_dir: Path) -> None:
    """Before a run is resumed: collect its job (if it was one); refuse while the job lives."""
    path = run_record(Path(run_dir).resolve())
    if path is None:
        return
    record = collect(path)
    if not record.collected and record.job.job_id != current_job_id():  # not this very job
        raise RunError(
            f"{run_dir}: still Slurm job {record.job.job_id} ({record.job.state}); "
            f"cancel it first: repro runs cancel {run_dir}"
        )
