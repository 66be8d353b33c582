"""The sweep: resolve (new or resume) -> dataset -> plan -> server -> one point at a time -> finish.

Each point is one EvalScope process (`harness.run.point`); `point.json` is written last and
`summary.json`/`summary.csv` after every point, so a crash loses at most the point in progress
and `--resume` continues from the first unfinished one. Nothing is written before every check
that can fail early has passed (run id, `--url`, port, GPUs, dataset, a resumable run).
The runner writes results only; the CLI writes the report after it.

The manifest's `configuration_key` (`harness.identity.configuration_key`; `workload_key` in
repro.run/1): what must be equal for two runs to be repeats of one experiment.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from harness import __version__
from harness.analysis.groups import repeat_aggregates
from harness.client.evalscope import (
    ClientArgs,
    client_command,
    client_version,
    evalscope_executable,
)
from harness.client.plan import PlannedPoint, plan_points
from harness.coherence import check_for_sweep, point_invalid_reason
from harness.coherence.references import coherence_preflight
from harness.engines import Server, StartContext
from harness.errors import ReproError, RunError, ServerError, ServerStartFailed
from harness.identity import configuration_key
from harness.results import (
    PointRecord,
    RunLayout,
    RunManifest,
    atomic_write_json,
    atomic_write_text,
    rows_to_csv,
    write_summary,
)
from harness.run.console import Progress, point_line, print_plan, summary_table
from harness.run.inputs import (
    DatasetFacts,
    effective_turns,
    inspect_dataset,
    subsequent_turn_length,
)
from harness.run.owner import stop_orphaned_group, this_owner
from harness.run.point import alive, run_point
from harness.run.request import SweepRequest, Target, finished_points, resolve
from harness.serve.doctor import require_ready
from harness.serve.profiles import render_serve_command
from harness.serve.provenance import host_facts

Echo = Callable[[str], None]


@dataclass
class Sweep:
    """A run in progress."""

    target: Target
    layout: RunLayout
    manifest: RunManifest
    ds: DatasetFacts
    turns: int
    planned: list[PlannedPoint]
    finished: dict[str, PointRecord] = field(default_factory=dict)
    allow_incoherent: bool = False
    incoherent_reason: str | None = None  # set: every point of the arm is invalid


def _create_run_dir(run_dir: Path, *, explicit: bool) -> Path:
    """Create the run directory; a default id taken in the same second gets a suffix."""
    for n in range(1, 100):
        candidate = run_dir if n == 1 else run_dir.with_name(f"{run_dir.name}-{n}")
        try:
            candidate.mkdir(parents=True, exist_ok=False)
            return candidate
        except FileExistsError:
            if explicit:
                raise RunError(f"{candidate}: already exists; a run is never overwritten") from None
        except OSError as exc:
            raise RunError(f"cannot create run directory {candidate}: {exc.strerror}") from None
    raise RunError(f"{run_dir}: 99 runs with this id already exist")


# --------------------------------------------------------------------------- open the run


def _client_args(target: Target, ds: DatasetFacts, model: str, base_url: str) -> ClientArgs:
    spec = target.profile.sweep
    extra = {"ignore_eos": True} if spec.ignore_eos else {}
    extra.update(spec.extra_args)
    return ClientArgs(
        model=model,
        base_url=base_url,
        dataset_path=ds.path or Path("<dataset>"),
        max_tokens=spec.max_tokens,
        multi_turn=spec.multi_turn,
        max_turns=spec.max_turns,
        extra_args=extra,
        think_time=spec.think_time,
        time_scale=float(target.time_scale or 1.0),
    )


def _new_manifest(target: Target, ds: DatasetFacts, planned: list[PlannedPoint]) -> RunManifest:
    prof = target.profile
    profile_dump = prof.model_dump(mode="json")
    sweep_dump = prof.sweep.model_dump(mode="json")
    return RunManifest(
        run_id=target.run_dir.name,
        status="running",
        created_at=time.time(),
        harness_version=__version__,
        engine=target.engine.record_name,
        engine_spec=target.engine.spec(target.engine_args),
        time_scale=target.engine.time_scale(target.engine_args),
        base_url=target.url or f"http://{prof.host}:{target.port or prof.port}",
        profile_name=prof.name,
        profile=profile_dump,
        overrides=target.overrides,
        gpus=max(int(prof.gpus), 1),
        dataset=ds.record(target.dataset_spec),
        configuration_key=configuration_key(
            dataset_sha256=ds.sha256 or "", sweep=sweep_dump, profile=profile_dump
        ),
        client={
            "name": "evalscope",
            "version": client_version(),
            "executable": str(evalscope_executable()),
        },
        host=host_facts(),
        sweep=sweep_dump,
        planned_points=[p.point_id for p in planned],
        repeats=target.repeats,
        owner=this_owner(),
        run_config=target.config.model_dump(mode="json") if target.config else None,
    )


def open_run(target: Target, ds: DatasetFacts, planned: list[PlannedPoint], echo: Echo) -> Sweep:
    """Create (or reopen) the run directory and write the manifest: the first write of a run."""
    manifest = target.manifest
    if manifest is None:
        target.run_dir = _create_run_dir(target.run_dir, explicit=target.explicit_id)
        manifest = _new_manifest(target, ds, planned)
    else:
        if target.stale_server_pgid:
            echo(f"stopping the server group {target.stale_server_pgid} a dead sweep left running")
            if not stop_orphaned_group(target.stale_server_pgid):
                raise RunError(
                    f"{target.run_dir}: server process group {target.stale_server_pgid} left by a "
                    "dead sweep does not stop; kill it, then --resume"
                )
        manifest.status = "running"
        manifest.owner = this_owner()
        manifest.notes.append(f"resumed at {time.time():.0f}")
        if manifest.start_failure:  # this attempt is judged on its own start
            manifest.notes.append(f"an earlier start failed: {manifest.start_failure}")
            manifest.start_failure = None
    layout = RunLayout(target.run_dir)
    atomic_write_json(layout.manifest, manifest)
    turns = effective_turns(ds.num_turns, target.profile.sweep.max_turns)
    return Sweep(target, layout, manifest, ds, turns, planned, finished_points(layout))


# --------------------------------------------------------------------------- run


def write_run_summary(
    layout: RunLayout, run_id: str, points: list[PointRecord], repeats: int
) -> None:
    summary = write_summary(layout, run_id, points)
    if repeats > 1:
        aggregates = repeat_aggregates(points)
        summary.aggregates = aggregates
        atomic_write_json(layout.summary_json, summary)
        atomic_write_text(layout.root / "summary_repeats.csv", rows_to_csv(aggregates))


def _set_aside_unfinished(layout: RunLayout, pid: str) -> None:
    """A point dir without point.json is a half-run attempt: keep it, out of the way."""
    pdir = layout.point_dir(pid)
    if pdir.exists() and not (pdir / "point.json").exists():
        attempts = layout.root / "attempts"
        attempts.mkdir(exist_ok=True)
        n = len(list(attempts.glob(f"{pid}-*")))
        pdir.rename(attempts / f"{pid}-{n}")


def _record_server(sweep: Sweep, server: Server, args: ClientArgs) -> None:
    manifest = sweep.manifest
    manifest.base_url = server.base_url
    manifest.launch = server.provenance()
    if sweep.target.engine.launches:
        manifest.serve_command = list(server.command)
        launch = manifest.launch
        manifest.build = launch.get("build") if isinstance(launch, dict) else None
        pid = getattr(server, "pid", None)
        if pid:  # the server runs in its own session: its pid is its process group
            manifest.owner["server_pgid"] = pid
    manifest.client["command_template"] = client_command(
        args,
        parallel="<parallel>",  # type: ignore[arg-type]  # placeholders of the template
        number="<number>",  # type: ignore[arg-type]  # (same)
        dataset_offset="<offset>",  # type: ignore[arg-type]  # (same)
        name="<point>",
        outputs_dir=Path("<point dir>/evalscope"),
        executable="evalscope",
    )
    atomic_write_json(sweep.layout.manifest, manifest)


def check_coherence(sweep: Sweep, server: Server, echo: Echo) -> None:
    """The profile's coherence check, right after readiness (and after every restart): a failure
    invalidates every point of the arm unless --allow-incoherent. The simulated engine emits no
    real tokens: there is nothing to judge, so it is skipped (and the manifest says so)."""
    if not sweep.target.engine.judges_replies:
        engine = sweep.target.engine
        what = "the simulated engine" if engine.simulated else f"engine {engine.kind}"
        sweep.manifest.notes.append(f"coherence: not applicable to {what}")
        return
    record = check_for_sweep(
        sweep.target.profile,
        server.base_url,
        allow_incoherent=sweep.allow_incoherent,
        run_dir=sweep.target.run_dir,
        against=sweep.manifest.coherence_against,
    )
    if record is None:
        return
    sweep.manifest.coherence = record
    atomic_write_json(sweep.layout.manifest, sweep.manifest)
    sweep.incoherent_reason = point_invalid_reason(record)
    allowed = " (--allow-incoherent: points count)" if sweep.allow_incoherent else ""
    echo(f"coherence: {record.verdict}: {record.reason}{allowed}")


def _run_points(
    sweep: Sweep, server: Server, args: ClientArgs, fail_fast: bool, echo: Echo
) -> bool:
    """Run every unfinished point; False when --fail-fast stopped at an invalid one."""
    target, layout, spec = sweep.target, sweep.layout, sweep.target.profile.sweep
    expected_turn = subsequent_turn_length(sweep.ds.manifest)
    points = list(sweep.finished.values())
    todo = [p for p in sweep.planned if p.point_id not in sweep.finished]
    progress = Progress(echo)
    k = target.time_scale
    for index, plan in enumerate(todo):
        if index:
            time.sleep(spec.sleep_between_points_s / k)
        if not alive(server):
            if not target.engine.launches:
                where = target.url or server.base_url
                raise ServerError(f"{where}: server not reachable before {plan.point_id}")
            echo(f"server not alive before {plan.point_id}: restarting")
            server.restart()
            check_coherence(sweep, server, echo)
        _set_aside_unfinished(layout, plan.point_id)
        echo(
            f"{plan.point_id} ({plan.label}): offset {plan.dataset_offset}, "
            f"{plan.number} conversations x {sweep.turns} turns"
        )
        record = run_point(
            plan,
            layout=layout,
            server=server,
            args=args,
            turns=sweep.turns,
            spec=spec,
            gpus=sweep.manifest.gpus,
            progress=progress,
            expected_turn_tokens=expected_turn,
            time_scale=k,
            engine=target.engine,
        )
        if not alive(server) and target.engine.launches:
            echo(f"  server died during {plan.point_id}: restarting")
            record.notes.append("server restarted after this point")
            if not fail_fast:
                server.restart()
                check_coherence(sweep, server, echo)
        if sweep.incoherent_reason:
            record.valid = False
            record.invalid_reasons.append(sweep.incoherent_reason)
        atomic_write_json(layout.point_json(plan.point_id), record)
        points.append(record)
        write_run_summary(layout, sweep.manifest.run_id, points, target.repeats)
        echo(point_line(record))
        if fail_fast and not record.valid:
            return False
    return True


def _drive(sweep: Sweep, fail_fast: bool, echo: Echo) -> None:
    """Start the server, run the points, and always stop the server and write the final status."""
    target, layout, manifest = sweep.target, sweep.layout, sweep.manifest
    echo(
        f"run {manifest.run_id}: {len(sweep.planned)} points ({len(sweep.finished)} already "
        f"finished) -> {target.run_dir}"
    )
    server: Server | None = None
    status = "failed"
    previous = None
    if threading.current_thread() is threading.main_thread():

        def on_sigterm(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        ctx = StartContext(
            log_path=layout.server_log,
            port=target.port,
            dataset=str(sweep.ds.path) if sweep.ds.path else target.dataset_spec,
            echo=echo,
        )
        server = target.engine.start(target.profile, target.engine_args, ctx)
        model = getattr(server, "served_model_name", None) or target.profile.served_model_name
        args = _client_args(target, sweep.ds, model, server.base_url)
        _record_server(sweep, server, args)
        check_coherence(sweep, server, echo)
        status = "complete" if _run_points(sweep, server, args, fail_fast, echo) else "failed"
    except KeyboardInterrupt:
        status = "partial"
        echo("interrupted: stopping the client and the server; finished points are kept")
        raise
    except ReproError as exc:
        status = "partial" if finished_points(layout) else "failed"
        if isinstance(exc, ServerStartFailed):  # recorded, so that the refusal can be judged
            stage = "startup" if server is None else "restart"
            manifest.start_failure = {
                "stage": stage,
                "exit_code": exc.server_exit_code,
                "reason": exc.reason,
                "log": str(layout.server_log),
            }
        raise
    finally:
        if server is not None and target.engine.launches:
            try:
                server.stop()
            except Exception as exc:  # noqa: BLE001 - the final status must still be written
                echo(f"warning: stopping the server failed: {exc}")
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        manifest.status = status  # type: ignore[assignment]  # one of the four literals above
        manifest.finished_at = time.time()
        atomic_write_json(layout.manifest, manifest)


def _dry_run(target: Target, ds: DatasetFacts, planned: list[PlannedPoint], echo: Echo) -> Path:
    prof = target.profile
    serve_cmd = None if target.url else render_serve_command(prof, port=target.port)
    base = target.url or f"http://{prof.host}:{target.port or prof.port}"
    base = base.rstrip("/").removesuffix("/v1")
    print_plan(
        echo,
        profile=prof,
        planned=planned,
        ds=ds,
        turns=effective_turns(ds.num_turns, prof.sweep.max_turns),
        args=_client_args(target, ds, prof.served_model_name, base),
        serve_cmd=serve_cmd,
        url=target.url,
        run_dir=target.run_dir,
    )
    echo("dry run: nothing written")
    return target.run_dir


def run_sweep(request: SweepRequest, *, echo: Echo = click.echo) -> Path:
    """Run (or plan, or resume) a sweep; returns the run directory. `request.port` (engine vllm
    only) overrides the profile's port for this run; it does not enter the configuration key."""
    target = resolve(request)
    coherence = coherence_preflight(
        target.profile, request, target.manifest, target.engine.judges_replies, echo
    )
    if not request.dry_run:
        target.engine.check_before_run(target.profile, target.engine_args, target.port)
        # the machine against the profile (RAM for pinned pools, disk, build, hub): one line per
        # failing check before a build, a dataset or a server costs anything
        preflight = (
            require_ready(target.profile, url=target.url, port=target.port)
            if target.engine.machine_preflight
            else []
        )
        for check in preflight:
            if check.status == "warn":
                echo(f"preflight: {check.line()}")
    ds = inspect_dataset(target.dataset_spec, build=not request.dry_run)
    if target.manifest is not None and ds.sha256 != target.manifest.dataset.get("sha256"):
        raise RunError(
            f"{target.run_dir}: dataset {ds.path} has sha256 {ds.sha256}, the run used "
            f"{target.manifest.dataset.get('sha256')}"
        )
    planned = plan_points(
        [(a, b) for a, b in target.profile.sweep.points],
        dataset_offset=target.profile.sweep.dataset_offset,
        num_conversations=ds.num_conversations,
        repeats=target.repeats,
        only=request.only_points,
    )
    if target.manifest is not None:
        wanted = set(target.manifest.planned_points)
        planned = [p for p in planned if p.point_id in wanted] or planned
    if request.dry_run:
        for line in coherence.lines():
            echo(f"coherence: {line}")
        return _dry_run(target, ds, planned, echo)
    sweep = open_run(target, ds, planned, echo)
    sweep.allow_incoherent = request.allow_incoherent
    coherence.record_in(sweep.manifest)
    _drive(sweep, request.fail_fast, echo)
    all_points = list(finished_points(sweep.layout).values())
    write_run_summary(sweep.layout, sweep.manifest.run_id, all_points, target.repeats)
    echo(summary_table(all_points))
    return target.run_dir
