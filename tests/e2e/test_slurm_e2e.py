"""Sweeps as real Slurm jobs on the single-node cluster of scripts/slurm-local.sh (slurm-wlm +
munge on localhost), with the real CPU vLLM build: a job's run against a local one, cancel and
resume as a new job, a job Slurm kills at its time limit, and a node failure under a running job
(Slurm requeues it; the requeued job resumes the run)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from harness.cluster.records import read_record, record_path
from harness.results import load_run, read_manifest
from harness.run.sweep import SweepRequest, run_sweep

ROOT = Path(__file__).resolve().parents[2]
REPRO = [sys.executable, "-c", "from harness.cli import main; main()"]
SMALL = ["--set", "sweep.points=[[1,1],[2,2]]", "--set", "sweep.max_tokens=16"]
# A job that launches its own server does so without compilation (not what these tests are
# about); the jobs that do not need a server of their own attach to the session's.
EAGER = ["--set", "serve.enforce-eager=true"]


def repro(*args: str, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [*REPRO, *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def runs_list(out: Path) -> str:
    done = repro("runs", "list", "--out", str(out), timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def line_of(listing: str, run_id: str) -> str:
    (line,) = [x for x in listing.splitlines() if x.split() and x.split()[0] == run_id]
    return line


def test_sweep_job_is_a_local_run_plus_job_facts(server_factory, slurm, tmp_path):
    out = tmp_path / "results"
    url = server_factory("cpu-tiny").base_url  # the same server for the job and the local run
    sweep = [*SMALL, "--out", str(out), "--no-report", "--profile", "cpu-tiny", "--url", url]
    done = repro("sweep", *sweep, "--executor", "slurm", "--run-id", "job")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    local = run_sweep(
        SweepRequest("cpu-tiny", overrides=SMALL[1::2], out=out, run_id="local", url=url),
        echo=lambda _m: None,
    )
    job_run, local_run = load_run(out / "job"), load_run(local)
    job_m = json.loads((out / "job" / "manifest.json").read_text())
    local_m = json.loads((local / "manifest.json").read_text())
    assert job_m.keys() == local_m.keys()
    assert local_m["job"] is None
    job = job_run.manifest.job
    record = json.loads((out / ".slurm" / "job.job.json").read_text())
    assert job.job_id == record["job"]["job_id"] and job.job_id.isdigit()
    assert (job.state, job.node, job.partition) == ("COMPLETED", socket.gethostname(), "debug")
    assert job.array_index is None and job.exit_code == "0:0"
    assert job_run.manifest.status == local_run.manifest.status == "complete"
    assert job_run.manifest.configuration_key == local_run.manifest.configuration_key
    for key in ("engine", "profile", "overrides", "sweep", "planned_points", "dataset", "gpus"):
        assert job_m[key] == local_m[key], key
    assert [p.point_id for p in job_run.points] == [p.point_id for p in local_run.points]
    for jp, lp in zip(job_run.points, local_run.points, strict=True):
        assert jp.valid and lp.valid, (jp.invalid_reasons, lp.invalid_reasons)
        assert jp.metrics.keys() == lp.metrics.keys()
        assert jp.client.total_requests == lp.client.total_requests
        files = {p.relative_to(out / "job") for p in (out / "job" / "points").rglob("*")}
        assert files, "no point files"
    job_files = {p.name for p in (out / "job").iterdir()}
    assert job_files == {p.name for p in local.iterdir()}
    head = (out / "job" / "summary.csv").read_text().splitlines()[0]
    assert head == (local / "summary.csv").read_text().splitlines()[0]
    listing = runs_list(out)
    assert " complete " in line_of(listing, "job")
    assert f"slurm {job.job_id} COMPLETED" in line_of(listing, "job")
    assert "slurm" not in line_of(listing, "local")


def _wait_for(path: Path, proc: subprocess.Popen | None, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(1)


def test_cancel_running_job_then_resume_it_as_a_new_job(server_factory, slurm, tmp_path):
    out = tmp_path / "results"
    url = server_factory("cpu-tiny").base_url
    sets = ["--set", "sweep.points=[[1,1],[2,2],[4,4]]", "--set", "sweep.max_tokens=16"]
    # 30 s between points: the job is surely still running when the first point is seen
    sets += ["--set", "sweep.sleep_between_points_s=30"]
    args = ["--profile", "cpu-tiny", *sets, "--out", str(out), "--run-id", "cut", "--no-report"]
    args += ["--url", url]
    done = repro("sweep", *args, "--executor", "slurm", "--no-wait", timeout=120)
    assert done.returncode == 0, done.stderr
    run = out / "cut"
    _wait_for(run / "points" / "p001-n0001-r0" / "point.json", None, 900)
    assert " running " in line_of(runs_list(out), "cut")
    first = read_manifest(run)
    cancelled = repro("runs", "cancel", str(run), timeout=400)
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    assert "CANCELLED" in cancelled.stdout and "--resume" in cancelled.stdout
    manifest = read_manifest(run)
    assert manifest.status == "partial"
    assert manifest.job.state == "CANCELLED" and manifest.job.reason == "cancelled (scancel)"
    old_id = manifest.job.job_id
    assert not (run / "points" / "p004-n0004-r0" / "point.json").exists()
    line = line_of(runs_list(out), "cut")
    assert " partial " in line and f"slurm {old_id} CANCELLED" in line
    p1 = json.loads((run / "points" / "p001-n0001-r0" / "point.json").read_text())

    resumed = repro("sweep", "--resume", str(run), "--executor", "slurm", "--no-report")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    final = load_run(run)
    assert final.manifest.status == "complete"
    assert final.manifest.job.state == "COMPLETED"
    assert final.manifest.job.job_id != old_id
    assert final.manifest.job.previous_job_ids == [old_id]
    assert [p.point_id for p in final.points] == ["p001-n0001-r0", "p002-n0002-r0", "p004-n0004-r0"]
    assert all(p.valid for p in final.points)
    again = json.loads((run / "points" / "p001-n0001-r0" / "point.json").read_text())
    assert again["started_at"] == p1["started_at"]  # the finished point was kept, not rerun
    assert final.manifest.created_at == first.created_at


def test_time_limit_leaves_the_run_failed_with_slurms_reason(server_factory, slurm, tmp_path):
    out = tmp_path / "results"
    url = server_factory("cpu-tiny").base_url
    # Three minutes: never enough for the sweep (150 s between points). The job ignores
    # submitit's USR2 only once its Python has started (harness/cluster/job.py); asked for 10 s
    # before the limit (harness/cluster/submit.py), which Slurm may send up to a minute early,
    # it comes at 110 s at the earliest, well after a job starts even on loaded cores.
    args = ["--profile", "cpu-tiny", "--out", str(out), "--run-id", "slow", "--no-report"]
    args += ["--set", "sweep.sleep_between_points_s=150", "--url", url]
    done = repro("sweep", *args, "--executor", "slurm", "--slurm-time", "3")
    assert done.returncode != 0
    assert "TIMEOUT (TimeLimit)" in done.stdout + done.stderr
    manifest = read_manifest(out / "slow")
    assert manifest.status == "failed"
    assert (manifest.job.state, manifest.job.reason) == ("TIMEOUT", "TimeLimit")
    assert any("TIMEOUT" in note for note in manifest.notes)
    line = line_of(runs_list(out), "slow")
    assert " failed " in line and "TIMEOUT" in line and "TimeLimit" in line


def test_nightly_runs_its_arms_as_one_job_array(cpu_build, slurm, tmp_path):
    root = tmp_path
    env = {
        **os.environ,
        "REPRO_HISTORY": str(root / "history.sqlite"),
        "REPRO_DASHBOARDS": str(root / "dashboards"),
        "PYTHONUNBUFFERED": "1",
    }
    summary = root / "night.md"
    command = [
        *REPRO, "nightly", "--profiles", "cpu-tiny,cpu-tiny-mtp", "--build", "cpu-0.32.0",
        *SMALL, *EAGER, "--out", str(root / "results"), "--summary", str(summary), "--no-dashboard",
        "--executor", "slurm",
    ]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=1500, check=False
    )
    data = json.loads(summary.with_suffix(".json").read_text())
    assert [a["status"] for a in data["arms"]] == ["new", "new"], done.stdout[-4000:]
    jobs = [read_manifest(Path(a["run_dir"])).job for a in data["arms"]]
    (array_id,) = {j.job_id.split("_")[0] for j in jobs}  # one array: submitted together
    assert [j.array_index for j in jobs] == [0, 1]
    assert [j.job_id for j in jobs] == [f"{array_id}_0", f"{array_id}_1"]
    assert all(j.state == "COMPLETED" and j.node == socket.gethostname() for j in jobs)
    assert done.returncode in (0, 1), done.stdout[-4000:] + done.stderr[-2000:]
    out = done.stdout
    assert out.index("[nightly-") < out.index("cpu-tiny: new")  # waited, then judged


def _scontrol_node(state: str, reason: str = "", *, check: bool = True) -> None:
    cmd = ["scontrol", "update", f"NodeName={socket.gethostname()}", f"State={state}"]
    cmd += [f"Reason={reason}"] if reason else []
    subprocess.run(cmd, check=check, timeout=60, capture_output=True)


def _job_field(job_id: str, key: str) -> str:
    done = subprocess.run(
        ["scontrol", "show", "job", "-o", job_id],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return dict(f.split("=", 1) for f in done.stdout.split() if "=" in f).get(key, "")


def test_node_failure_requeues_the_job_and_the_requeued_job_resumes_the_run(
    cpu_build, slurm, tmp_path
):
    out = tmp_path / "results"
    sets = ["--set", "sweep.points=[[1,1],[2,2],[4,4]]", "--set", "sweep.max_tokens=16"]
    args = ["--profile", "cpu-tiny", *sets, "--out", str(out), "--run-id", "node", "--no-report"]
    # its own server: the failed node takes it down, and the requeued job must start another
    args += ["--set", "sweep.sleep_between_points_s=10", *EAGER]
    done = repro("sweep", *args, "--executor", "slurm", "--no-wait", timeout=120)
    assert done.returncode == 0, done.stderr
    run = out / "node"
    first_point = run / "points" / "p001-n0001-r0" / "point.json"
    _wait_for(first_point, None, 900)
    job_id = read_record(record_path(out, "node")).job.job_id
    p1 = json.loads(first_point.read_text())
    # The node fails under the running job: Slurm kills it and, as batch jobs are requeued by
    # default (JobRequeue=1), runs the same job again once a node is back.
    _scontrol_node("DOWN", "repro-node-failure-test")
    try:
        deadline = time.monotonic() + 120
        while _job_field(job_id, "Restarts") in ("", "0") and time.monotonic() < deadline:
            time.sleep(1)
        assert _job_field(job_id, "Restarts") == "1"
        assert _job_field(job_id, "JobState") == "PENDING"
        # Slurm holds a requeued job back (BeginTime: cred_expire + 1 s, 31 s in slurm-local) so
        # the killed attempt can end; releasing it early fails the launch ("already running").
    finally:  # slurm-local's ReturnToService=2 has usually brought the node back already
        _scontrol_node("RESUME", check=False)
    deadline = time.monotonic() + 1200
    while read_manifest(run).status != "complete" and time.monotonic() < deadline:
        time.sleep(3)
    line = line_of(runs_list(out), "node")  # collects the job once it has ended
    final = load_run(run)
    assert final.manifest.status == "complete", final.manifest.notes
    assert [p.point_id for p in final.points] == ["p001-n0001-r0", "p002-n0002-r0", "p004-n0004-r0"]
    assert all(p.valid for p in final.points)
    again = json.loads(first_point.read_text())
    assert again["started_at"] == p1["started_at"]  # resumed: the finished point was kept
    (note,) = [n for n in final.manifest.notes if "requeued by Slurm" in n]
    assert f"slurm job {job_id} requeued by Slurm (restart 1;" in note
    assert final.manifest.job.job_id == job_id and final.manifest.job.state == "COMPLETED"
    assert " complete " in line
