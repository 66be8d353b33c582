"""Slurm's view of a job: state, reason, node, partition; and cancelling it.

Asked from `scontrol show job` first (pending, running and recently ended jobs: MinJobAge), then
`sacct` (ended jobs, on clusters with an accounting database). Nothing here writes a file.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

from harness import env as harness_env
from harness.errors import ReproError

INSTALL_HINT = (
    "scripts/slurm-local.sh start  (as root: apt-get installs slurm-wlm + munge, starts them)"
)
# Slurm job states after which nothing of the job runs any more.
TERMINAL = {
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "PREEMPTED",
    "REVOKED",
    "SPECIAL_EXIT",
}
# Ended by Slurm itself, not by the sweep: the run is failed with Slurm's reason.
KILLED_BY_SLURM = {"TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
_PAIR = re.compile(r"(\w+)=(\S*)")


class SlurmError(ReproError):
    """Slurm is missing, refused a request, or answered something unreadable."""


@dataclass(frozen=True)
class SlurmState:
    job_id: str
    state: str  # base state, e.g. RUNNING, CANCELLED (sacct's "CANCELLED by 0" -> CANCELLED)
    reason: str | None
    exit_code: str | None
    node: str | None
    partition: str | None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


def current_job_id() -> str | None:
    """The id of the Slurm job this process runs in ("<array>_<index>" for an array task)."""
    array_job, index = (
        harness_env.text("SLURM_ARRAY_JOB_ID"),
        harness_env.text("SLURM_ARRAY_TASK_ID"),
    )
    if array_job and index:
        return f"{array_job}_{index}"
    return harness_env.text("SLURM_JOB_ID")


def have_slurm() -> bool:
    return all(shutil.which(tool) for tool in ("sbatch", "scontrol", "scancel", "srun"))


def require_slurm() -> None:
    if not have_slurm():
        raise SlurmError(f"--executor slurm: Slurm's commands are not on PATH ({INSTALL_HINT})")


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    except FileNotFoundError:
        raise SlurmError(f"{cmd[0]}: not found ({INSTALL_HINT})") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{' '.join(cmd)}: no answer from Slurm in 60 s") from None


def _none(value: str | None) -> str | None:
    return None if value in (None, "", "None", "(null)") else value


def _from_scontrol(job_id: str) -> SlurmState | None:
    done = _run(["scontrol", "show", "job", "-o", job_id])
    if done.returncode != 0:
        if "Invalid job id" in done.stderr:
            return None  # ended longer ago than MinJobAge (or never existed)
        raise SlurmError(f"scontrol show job {job_id}: {done.stderr.strip()}")
    line = done.stdout.strip().splitlines()[0] if done.stdout.strip() else ""
    facts = dict(_PAIR.findall(line))
    if "JobState" not in facts:
        raise SlurmError(f"scontrol show job {job_id}: unreadable answer {line[:200]!r}")
    return SlurmState(
        job_id=job_id,
        state=facts["JobState"],
        reason=_none(facts.get("Reason")),
        exit_code=_none(facts.get("ExitCode")),
        node=_none(facts.get("BatchHost")) or _none(facts.get("NodeList")),
        partition=_none(facts.get("Partition")),
    )


def _from_sacct(job_id: str) -> SlurmState | None:
    if not shutil.which("sacct"):
        return None
    fields = "JobID,State,Reason,ExitCode,NodeList,Partition"
    done = _run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", fields])
    if done.returncode != 0:
        return None  # no accounting database on this cluster
    for line in done.stdout.splitlines():
        parts = line.split("|")
        if len(parts) == 6 and parts[0] == job_id:
            return SlurmState(
                job_id=job_id,
                state=parts[1].split()[0] if parts[1] else "UNKNOWN",
                reason=_none(parts[2]),
                exit_code=_none(parts[3]),
                node=_none(parts[4]),
                partition=_none(parts[5]),
            )
    return None


def job_state(job_id: str) -> SlurmState | None:
    """Slurm's facts about JOB_ID, or None when Slurm no longer knows it."""
    return _from_scontrol(job_id) or _from_sacct(job_id)


def cancel(job_id: str) -> None:
    """scancel JOB_ID (through submitit, which owns the job's handle)."""
    from submitit.slurm.slurm import SlurmJob

    try:
        SlurmJob(folder="/", job_id=job_id).cancel(check=True)
    except subprocess.CalledProcessError as exc:
        raise SlurmError(f"scancel {job_id} failed (exit {exc.returncode})") from None
