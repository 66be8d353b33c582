"""What runs inside a Slurm job, on its node: the ordinary `repro sweep`, then the job's facts.

submitit unpickles `sweep_job` in the job's Python (the harness venv) and calls it. The sweep
runs as a child process, exactly as a user would run it; when it exits, the job's facts (id,
array index, node, partition) go into the run's manifest. On SIGTERM (scancel, time limit) Slurm
signals every process of the job: the sweep stops its server and marks the run partial by
itself, and this wrapper writes nothing (the submitter collects Slurm's final state). submitit's
USR2 (requeue before the time limit) is ignored: a sweep is resumed, not requeued. A job that
Slurm itself requeues (node failure, preemption; `SLURM_RESTART_COUNT` > 0) resumes its run.
"""

from __future__ import annotations

import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

from harness import env as harness_env
from harness.cluster.slurm import current_job_id
from harness.errors import RunError
from harness.results import JobFacts, atomic_write_json, read_manifest
from harness.serve.lifecycle import free_port


def facts_from_environment(state: str, reason: str | None = None) -> JobFacts:
    index = (
        harness_env.text("SLURM_ARRAY_TASK_ID") if harness_env.text("SLURM_ARRAY_JOB_ID") else None
    )
    return JobFacts(
        job_id=current_job_id() or "?",
        array_index=int(index) if index else None,
        node=harness_env.text("SLURMD_NODENAME") or socket.gethostname(),
        partition=harness_env.text("SLURM_JOB_PARTITION"),
        state=state,
        reason=reason,
    )


def _record_in_manifest(run_dir: Path, facts: JobFacts) -> None:
    from harness.cluster.records import merge_facts

    if not (run_dir / "manifest.json").is_file():
        return
    manifest = read_manifest(run_dir)
    merge_facts(manifest, facts)
    atomic_write_json(run_dir / "manifest.json", manifest)


def _take_over_after_requeue(run_dir: Path, restarts: int) -> bool:
    """A requeued job (Slurm reruns a batch job whose node failed, or that was preempted) finds
    the run its first attempt started: Slurm has ended that attempt, so a `running` manifest is
    stale and the run becomes partial, to be resumed. False when the run has nothing left to do."""
    manifest = read_manifest(run_dir)
    if manifest.status == "complete":
        return False
    job = current_job_id() or "?"
    manifest.notes.append(
        f"slurm job {job} requeued by Slurm (restart {restarts}; "
        f"the attempt on {manifest.owner.get('host', '?')} was {manifest.status}): resumed"
    )
    if manifest.status == "running":
        manifest.status = "partial"
    atomic_write_json(run_dir / "manifest.json", manifest)
    return True


def sweep_job(
    argv: list[str],
    env: dict[str, str],
    run_dir: str,
    pick_port: bool,
    resume_argv: list[str] | None = None,
) -> int:
    """Run `repro sweep ARGV...` in this job; raise when it fails (the job is then FAILED).
    A requeued job runs RESUME_ARGV instead: the run continues from its first unfinished point."""
    restarts = harness_env.integer("SLURM_RESTART_COUNT", 0) or 0
    if restarts and resume_argv and (Path(run_dir) / "manifest.json").is_file():
        if not _take_over_after_requeue(Path(run_dir), restarts):
            _record_in_manifest(Path(run_dir), facts_from_environment("COMPLETED"))
            return 0
        argv = resume_argv
    signals: list[int] = []

    def note(signum: int, frame: Any) -> None:
        signals.append(signum)

    signal.signal(signal.SIGTERM, note)
    # submitit asks Slurm for USR2 10 s before the time limit (submit.py), to every process;
    # its default action kills: ignored here and, inherited, in the sweep, server and client,
    # so the time limit itself (SIGTERM, then TIMEOUT) ends the run, in Slurm's words.
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    command = [*argv, "--port", str(free_port())] if pick_port else list(argv)
    # A node may run several sweep jobs at once: each launches its server on a free port.
    child = subprocess.Popen(command, env=harness_env.for_child(env))
    code = child.wait()  # retried across signals (PEP 475)
    if signals:
        return code  # killed by Slurm: the submitter collects Slurm's state and reason
    if code == 0:
        _record_in_manifest(Path(run_dir), facts_from_environment("COMPLETED"))
        return 0
    _record_in_manifest(
        Path(run_dir), facts_from_environment("FAILED", f"repro sweep exited with {code}")
    )
    raise RunError(f"repro sweep exited with {code}: {' '.join(command)}")
