"""Runs that are Slurm jobs, as `repro runs list|cancel` see them."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from harness.cluster.records import JobRecord, collect, collect_all, record_path
from harness.cluster.slurm import cancel, require_slurm
from harness.errors import RunError
from harness.paths import results_dir

Echo = Callable[[str], None]
# `repro runs list` words for a job whose run directory does not exist (yet).
_NO_RUN = {"PENDING": "queued", "CANCELLED": "cancelled"}


def job_cell(record: JobRecord) -> str:
    job = record.job
    where = f" on {job.node}" if job.node and job.state != "PENDING" else ""
    why = f" ({job.reason})" if job.reason else ""
    return f"slurm {job.job_id} {job.state}{where}{why}"


def list_status(record: JobRecord, manifest_status: str | None) -> str:
    """What `repro runs list` calls a job's run: queued / running / the run's own status."""
    state = record.job.state
    if not record.collected and state == "PENDING":
        return "queued"
    if manifest_status is None:
        if record.collected:
            return _NO_RUN.get(state, "failed")
        return _NO_RUN.get(state, "running")  # started, has not written its manifest yet
    return manifest_status


def job_records(root: Path) -> dict[str, JobRecord]:
    """Every job record under ROOT, refreshed from Slurm (ended jobs are collected into their
    runs here, once)."""
    return collect_all(root)


def find_record(run: Path | str, out: Path | None = None) -> Path:
    """RUN is a run directory or a run id (under OUT or results/); a queued job has no
    directory yet, only its record."""
    path = Path(run)
    candidates = [record_path(path.parent, path.name)] if path.is_dir() else []
    root = Path(out) if out else results_dir()
    candidates.append(record_path(root, path.name))
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    if path.is_dir() or (root / path.name).is_dir():
        raise RunError(f"{run}: not a Slurm job's run (no {candidates[0].name} in .slurm/)")
    raise RunError(f"{run}: no such run or job (looked in {root})")


def cancel_run(
    run: Path | str, *, out: Path | None = None, echo: Echo = print, timeout_s: float = 300.0
) -> JobRecord:
    """scancel the run's job and wait until Slurm says it ended; the run is then partial."""
    path = find_record(run, out)
    require_slurm()
    record = collect(path)
    if record.collected:
        raise RunError(
            f"{record.run_dir}: its job {record.job.job_id} already ended ({record.job.state})"
        )
    cancel(record.job.job_id)
    echo(f"scancel {record.job.job_id}: waiting for the job to stop")
    deadline = time.monotonic() + timeout_s
    while not record.collected:
        if time.monotonic() > deadline:
            raise RunError(
                f"job {record.job.job_id} still {record.job.state} {timeout_s:.0f} s after scancel"
            )
        time.sleep(1.0)
        record = collect(path)
    return record
