"""`repro runs list`: the local runs joined with their Slurm jobs' records (here, above the run
layer, because the jobs are the cluster's)."""

from __future__ import annotations

from pathlib import Path

from harness.cluster.runs import job_cell, job_records, list_status
from harness.errors import ReproError, RunError
from harness.names import for_terminal
from harness.paths import results_dir
from harness.records import run_damage
from harness.results import load_run
from harness.run.owner import owner_state


def list_runs(out: Path | None = None) -> list[str]:
    """Local runs and Slurm jobs' runs (ended jobs are collected into their runs first); a job
    that has no run directory yet (queued, or ended before it started) is listed too."""
    root = Path(out or results_dir())
    if out is not None and not root.is_dir():  # a typo must not read as "no runs"
        raise RunError(f"--out {root}: {'not a folder' if root.exists() else 'no such folder'}")
    jobs = job_records(root)
    lines = [f"{'run':40} {'status':9} {'profile':20} {'valid/done/planned':19} configuration"]
    for manifest_path in sorted(root.glob("*/manifest.json")):
        try:
            run = load_run(manifest_path.parent)
        except ReproError as exc:
            lines.append(f"{manifest_path.parent.name:40} unreadable: {exc}")
            continue
        m = run.manifest
        status: str = m.status
        if status == "running" and owner_state(m.owner) == "dead":
            status = "stale"  # its harness died without writing a final status
        status = "damaged" if run_damage(run) else status  # harness.records: promise not kept
        counts = f"{len(run.valid_points())}/{len(run.points)}/{len(m.planned_points)}"
        job = jobs.pop(m.run_id, None)
        status = list_status(job, status) if job else status
        tail = f"  {job_cell(job)}" if job else ""
        lines.append(
            f"{m.run_id:40} {status:9} {m.profile_name:20} {counts:19} {m.configuration_key}{tail}"
        )
    for run_id, job in sorted(jobs.items()):  # jobs whose run has not written a manifest
        status = list_status(job, None)
        lines.append(f"{run_id:40} {status:9} {job.profile:20} {'-':19} -  {job_cell(job)}")
    return [for_terminal(line) for line in lines]  # run ids and folder names are read from disk
