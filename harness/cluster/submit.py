"""Submit sweeps as Slurm jobs (one run = one job) with submitit, wait for them, collect them.

The submitter checks everything it can without the node (profile, overrides, run id, a
resumable run), fixes the run id, and submits a job that runs the ordinary `repro sweep` into
the same results folder (on the shared file system). Port, GPU and dataset checks happen on the
node, where they mean something. Several requests with the same resources go as one job array.
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from harness import engines
from harness import env as harness_env
from harness.cluster.job import sweep_job
from harness.cluster.options import SlurmOptions
from harness.cluster.records import (
    JobRecord,
    collect,
    new_facts,
    read_record,
    record_path,
    settle_job_run,
    write_record,
)
from harness.cluster.slurm import SlurmError, require_slurm
from harness.coherence.references import coherence_preflight
from harness.errors import ReproError, RunError
from harness.results import read_manifest
from harness.run.sweep import SweepRequest, resolve
from harness.serve.profiles import Profile

Echo = Callable[[str], None]
# Passed to the sweep on the node: where results, caches and the harness's code are.
_PASS_ENV = ("PYTHONPATH", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME")


@dataclass
class Prepared:
    request: SweepRequest
    run_id: str
    run_dir: Path
    profile: Profile
    argv: list[str]
    gres: str | None
    resume_argv: list[str]  # what a requeued job runs instead: resume the run it started


@dataclass(frozen=True)
class Submitted:
    run_dir: Path
    record: Path
    job_id: str


def repro_command() -> list[str]:
    """The harness's own CLI in the venv of this interpreter (the job runs the same venv)."""
    script = Path(sys.executable).parent / "repro"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "from harness.cli import main; main()"]


def _absolute(value: str) -> str:
    return str(Path(value).resolve()) if Path(value).exists() else value


def _sweep_argv(request: SweepRequest, run_id: str, out: Path, report: bool) -> list[str]:
    argv = [*repro_command(), "sweep"]
    if request.resume is not None:
        argv += ["--resume", str(Path(request.resume).resolve())]
    else:
        prof = request.profile
        name = str(prof.source) if isinstance(prof, Profile) else _absolute(str(prof))
        argv += ["--profile", name, "--out", str(out), "--run-id", run_id]
        for item in request.overrides:
            argv += ["--set", item]
        if request.dataset:
            argv += ["--dataset", _absolute(request.dataset)]
        if request.engine != engines.DEFAULT_CLI:
            argv += ["--engine", request.engine]
        argv += engines.options_argv(request.engine_options)
        if request.coherence_against:  # a resumed run keeps the one it recorded
            argv += ["--coherence-against", _absolute(request.coherence_against)]
    if request.allow_incoherent:
        argv.append("--allow-incoherent")
    if request.fail_fast:
        argv.append("--fail-fast")
    if request.repeats > 1:
        argv += ["--repeats", str(request.repeats)]
    if request.only_points:
        argv += ["--points", ",".join(request.only_points)]
    if request.port:
        argv += ["--port", str(request.port)]
    if not report:
        argv.append("--no-report")
    return argv


def _free_run_id(out: Path, base: str) -> str:
    for n in range(1, 100):
        rid = base if n == 1 else f"{base}-{n}"
        if not (out / rid).exists() and not record_path(out, rid).exists():
            return rid
    raise RunError(f"{out / base}: 99 runs with this id already exist")


def _prepare_resume(resume: Path) -> tuple[Path, str]:
    run_dir = Path(resume).resolve()
    settle_job_run(run_dir)
    return run_dir.parent, run_dir.name


def prepare(request: SweepRequest, options: SlurmOptions, *, report: bool) -> Prepared:
    """Every check that needs no node; the run id is fixed here (the job gets it explicitly)."""
    if request.dry_run:
        raise ReproError("--dry-run prints a local plan; drop --executor slurm to see it")
    if request.resume is not None:
        out, run_id = _prepare_resume(request.resume)
        target = resolve(request)
    else:
        target = resolve(request)
        out = target.run_dir.parent.resolve()
        if request.run_id:
            run_id = request.run_id
            if record_path(out, run_id).exists():
                raise RunError(
                    f"{record_path(out, run_id)}: run id {run_id!r} was submitted before"
                )
        else:
            run_id = _free_run_id(out, target.run_dir.name)
    # a missing coherence reference fails here, not on the node after a queue wait
    coherence_preflight(
        target.profile, request, target.manifest, target.engine.judges_replies, lambda _: None
    )
    argv = _sweep_argv(request, run_id, out, report)
    # --resume takes profile, overrides, dataset and URL from the run itself.
    resume_argv = _sweep_argv(replace(request, resume=out / run_id), run_id, out, report)
    gres = options.gres_for(int(target.profile.gpus))
    return Prepared(request, run_id, out / run_id, target.profile, argv, gres, resume_argv)


def _executor(folder: Path, options: SlurmOptions, gres: str | None, name: str):
    import submitit

    executor = submitit.SlurmExecutor(folder=folder, python=shlex.quote(sys.executable))
    setup = []
    if pythonpath := harness_env.text("PYTHONPATH"):  # the job's Python must import this harness
        setup.append(f"export PYTHONPATH={shlex.quote(pythonpath)}")
    setup += list(options.setup)
    params = {
        "job_name": name,
        "partition": options.partition,
        "account": options.account,
        "time": options.time_min,  # None: the partition's default
        "gres": gres,
        "cpus_per_task": options.cpus_per_task,
        "setup": setup,
        "stderr_to_stdout": True,
        # submitit's USR2 (for its requeue-before-timeout) is ignored by the job once its Python
        # runs (harness/cluster/job.py), but kills it before then. Its default, 90 s before the
        # limit (and Slurm may send it up to a minute earlier still), could land while a job
        # under a short limit was starting on a loaded node: FAILED, not TIMEOUT.
        "signal_delay_s": 10,
    }
    executor.update_parameters(**params)
    return executor


def _job_env() -> dict[str, str]:
    return harness_env.with_prefix("REPRO_", _PASS_ENV)


def _submit_group(group: list[Prepared], options: SlurmOptions) -> list[Submitted]:
    first = group[0]
    label = first.run_id if len(group) == 1 else f"array-{first.run_id}"
    folder = first.run_dir.parent / ".slurm" / label
    executor = _executor(folder, options, first.gres, f"repro-{first.run_id}")
    env = _job_env()
    jobs = []
    try:
        with executor.batch():
            for prep in group:
                pick_port = not prep.request.attached_url and not prep.request.port
                args = (prep.argv, env, str(prep.run_dir), pick_port, prep.resume_argv)
                jobs.append(executor.submit(sweep_job, *args))
    except Exception as exc:  # noqa: BLE001 - sbatch's refusal, in its own words
        text = str(exc).strip().splitlines()
        detail = "; ".join(line for line in text if "error" in line.lower()) or str(exc)
        raise SlurmError(f"sbatch refused the job: {detail}") from None
    done = []
    for prep, job in zip(group, jobs, strict=True):
        path = record_path(prep.run_dir.parent, prep.run_id)
        facts = new_facts(job.job_id, partition=options.partition, log=str(job.paths.stdout))
        if path.is_file():  # a resumed run: keep the earlier job's id
            old = read_record(path).job
            facts.previous_job_ids = [*old.previous_job_ids, old.job_id]
        record = JobRecord(
            run_id=prep.run_id,
            run_dir=str(prep.run_dir),
            profile=prep.profile.name,
            command=prep.argv,
            folder=str(folder),
            job=facts,
        )
        write_record(path, record)
        done.append(Submitted(prep.run_dir, path, job.job_id))
    return done


def submit(
    requests: Sequence[SweepRequest], options: SlurmOptions, *, report: bool = True
) -> list[Submitted]:
    """Submit one job per request; requests asking for the same resources form one array."""
    require_slurm()
    prepared = [prepare(r, options, report=report) for r in requests]
    ids = [p.run_dir for p in prepared]
    if len(set(ids)) != len(ids):
        raise RunError("two requests name the same run directory")
    groups: dict[str | None, list[Prepared]] = {}
    for prep in prepared:
        groups.setdefault(prep.gres, []).append(prep)
    by_dir: dict[Path, Submitted] = {}
    for group in groups.values():
        for sub in _submit_group(group, options):
            by_dir[sub.run_dir] = sub
    return [by_dir[p.run_dir] for p in prepared]


def wait_for(submitted: Sequence[Submitted], *, echo: Echo, poll_s: float = 3.0) -> list[JobRecord]:
    """Until every job has ended and been collected; echo each state change."""
    seen: dict[Path, str] = {}
    while True:
        records = [collect(s.record) for s in submitted]
        for sub, rec in zip(submitted, records, strict=True):
            state = rec.job.state + (f" ({rec.job.reason})" if rec.job.reason else "")
            if seen.get(sub.record) != state:
                seen[sub.record] = state
                echo(f"slurm job {rec.job.job_id} [{rec.run_id}]: {state}")
        if all(r.collected for r in records):
            return records
        time.sleep(poll_s)


def outcome(record: JobRecord) -> Path:
    """The run directory of a finished job; an error naming the job's state when it did not
    complete."""
    run_dir = Path(record.run_dir)
    job = record.job
    what = f"slurm job {job.job_id} ended {job.state}" + (f" ({job.reason})" if job.reason else "")
    if not (run_dir / "manifest.json").is_file():
        raise RunError(f"{run_dir}: {what} before the run started; job log: {job.log}")
    status = read_manifest(run_dir).status
    if status != "complete":
        raise RunError(f"{run_dir}: {what}; the run is {status} (job log: {job.log})")
    return run_dir


def run_as_jobs(
    requests: Sequence[SweepRequest],
    options: SlurmOptions,
    *,
    echo: Echo,
    report: bool = False,
    poll_s: float = 3.0,
) -> list[Path | ReproError]:
    """Submit, wait, collect: per request its finished run directory or the error."""
    submitted = submit(requests, options, report=report)
    records = wait_for(submitted, echo=echo, poll_s=poll_s)
    results: list[Path | ReproError] = []
    for record in records:
        try:
            results.append(outcome(record))
        except ReproError as exc:
            results.append(exc)
    return results


def sweep_as_job(
    request: SweepRequest, options: SlurmOptions, *, report: bool, wait: bool, echo: Echo
) -> Path:
    """`repro sweep --executor slurm`: submit; unless --no-wait, wait and collect; an error
    naming Slurm's state and reason when the run did not complete."""
    (sub,) = submit([request], options, report=report)
    record = read_record(sub.record)
    echo(f"submitted slurm job {sub.job_id}: run {sub.run_dir}")
    echo(f"  job log: {record.job.log}")
    echo(f"  follow: repro runs list --out {sub.run_dir.parent}")
    echo(f"  stop: repro runs cancel {sub.run_dir}")
    if not wait:
        return sub.run_dir
    (record,) = wait_for([sub], echo=echo)
    run_dir = outcome(record)
    echo(f"run {run_dir}: complete (slurm job {record.job.job_id} on {record.job.node})")
    return run_dir
