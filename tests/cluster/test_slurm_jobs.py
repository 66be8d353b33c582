"""Real Slurm (scripts/slurm-local.sh), no vLLM: a queued job is listed and cancelled, a job that
fails on its node before writing its run is listed failed with Slurm's reason, and sbatch's
refusal is an error in sbatch's words. Skipped, with the install command, without Slurm."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from click.testing import CliRunner

from harness.cli import cli
from harness.cluster.listing import list_runs
from harness.cluster.records import read_record, record_path
from harness.cluster.slurm import job_state

ROOT = Path(__file__).resolve().parents[2]


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=True)


def row(out: Path, run_id: str) -> str:
    (line,) = [x for x in list_runs(out) if x.split()[0] == run_id]
    return line


def test_queued_job_is_listed_then_cancelled_without_a_run(slurm, tmp_path):
    done = invoke(
        "sweep", "--profile", "cpu-tiny", "--executor", "slurm", "--slurm-partition", "held",
        "--out", str(tmp_path), "--run-id", "waits", "--no-wait",
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    job_id = read_record(record_path(tmp_path, "waits")).job.job_id
    time.sleep(1)
    assert job_state(job_id).state == "PENDING"
    script = subprocess.run(
        ["scontrol", "write", "batch_script", job_id, "-"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "#SBATCH --signal=USR2@10" in script  # not submitit's 90 s (harness/cluster/submit.py)
    line = row(tmp_path, "waits")
    assert " queued " in line and f"slurm {job_id} PENDING" in line and "PartitionDown" in line
    done = invoke("runs", "cancel", "waits", "--out", str(tmp_path))
    assert done.exit_code == 0, done.output
    assert "nothing was written" in done.output
    assert not (tmp_path / "waits").exists()
    line = row(tmp_path, "waits")
    assert " cancelled " in line and "CANCELLED" in line
    done = invoke("runs", "cancel", "waits", "--out", str(tmp_path))
    assert "already ended (CANCELLED)" in str(done.exception)


def test_job_failing_on_its_node_is_listed_failed_with_its_log(slurm, tmp_path):
    # The node's own check (the --url server answers nothing) fails before any write.
    done = invoke(
        "sweep", "--profile", "cpu-tiny", "--executor", "slurm", "--url", "http://127.0.0.1:9",
        "--out", str(tmp_path), "--run-id", "nohost", "--no-report",
    )  # fmt: skip
    assert done.exit_code != 0
    assert "ended FAILED (NonZeroExitCode) before the run started" in str(done.exception)
    record = read_record(record_path(tmp_path, "nohost"))
    assert record.collected and record.job.exit_code == "1:0"
    log = Path(record.job.log).read_text()
    assert "--url http://127.0.0.1:9" in log  # the sweep's own error, in the job's log
    line = row(tmp_path, "nohost")
    assert " failed " in line and "FAILED" in line


def test_sbatch_refusal_is_reported_in_its_words(slurm, tmp_path):
    done = invoke(
        "sweep", "--profile", "cpu-tiny", "--executor", "slurm", "--slurm-partition", "nosuch",
        "--out", str(tmp_path), "--run-id", "nope",
    )  # fmt: skip
    assert "sbatch refused the job" in str(done.exception)
    assert "invalid partition" in str(done.exception).lower()
    assert not record_path(tmp_path, "nope").exists()


def test_cancel_of_a_local_run_is_refused(tmp_path):
    (tmp_path / "plain").mkdir()
    done = invoke("runs", "cancel", str(tmp_path / "plain"))
    assert "not a Slurm job's run" in str(done.exception)
