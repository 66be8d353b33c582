"""The sweep: profile -> build -> server -> dataset -> one EvalScope process per point -> results.

`run_sweep` plans the points exactly as the blog's single `evalscope perf` command would have run
them (offsets chained by `number`, evalscope.md §4.2), then for each point: sends the warm-up
requests, takes a start sample of `/metrics`, runs the client with the scraper polling in the
background, takes an end sample, derives the metrics, judges validity and writes `point.json`
last.  `summary.json`/`summary.csv` are rewritten after every point, so a crash loses at most the
point in progress and `--resume` continues from the first unfinished one.

Workload key (what must be equal for two runs to be comparable; see results/README.md): sha256 of
the canonical JSON of {dataset sha256, sweep points, dataset_offset, max_tokens, multi_turn,
max_turns, ignore_eos, extra_args, profile model, serve block without host/port, build name,
gpus}.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import shlex
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import requests

from harness import __version__
from harness.analysis.fidelity import check_fidelity
from harness.analysis.metrics import derive_point_metrics
from harness.analysis.stats import median_ci
from harness.client.evalscope import (
    ClientArgs,
    client_command,
    client_env,
    client_version,
    conversations_done,
    evalscope_executable,
    point_output_dir,
    read_percentiles,
    read_request_bodies,
    read_requests,
    read_summary,
    run_child,
)
from harness.client.scrape import Scraper, write_samples_csv
from harness.errors import ConfigError, DatasetError, ReproError, RunError, ServerError
from harness.paths import results_dir
from harness.results import (
    METRICS,
    PointRecord,
    RunLayout,
    RunManifest,
    atomic_write_json,
    atomic_write_text,
    load_run,
    point_id,
    read_manifest,
    read_point,
    rows_to_csv,
    write_summary,
)

Echo = Callable[[str], None]


# --------------------------------------------------------------------------- planning


@dataclass(frozen=True)
class PlannedPoint:
    point_id: str
    label: str
    parallel: int
    number: int
    repeat: int
    dataset_offset: int
    conversations: list[int]


def _rotation(num_conversations: int, offset: int, number: int) -> list[int]:
    try:
        from harness.dataset.rotation import conversations_for_points
    except ImportError:  # DATASET's module not present: same semantics (evalscope.md §4.2)
        order = list(range(num_conversations))
        if 0 < offset < num_conversations:
            order = order[offset:] + order[:offset]
        return [order[i % num_conversations] for i in range(number)] if order else []
    return conversations_for_points(num_conversations, offset, [number])[0]


def _select(points: list[tuple[int, int]], only: Sequence[str] | None) -> set[int]:
    if not only:
        return set(range(len(points)))
    wanted = {item.strip() for entry in only for item in entry.split(",") if item.strip()}
    chosen: set[int] = set()
    for want in wanted:
        hits = {
            i
            for i, (p, n) in enumerate(points)
            if want in (f"c{p}", str(p), f"{p}x{n}", point_id(p, n, 0)[:-3])
        }
        if not hits:
            known = ", ".join(f"c{p}" for p, _ in points)
            raise ConfigError(f"--points: {want!r} is not a point of this sweep (points: {known})")
        chosen |= hits
    return chosen


def plan_points(
    points: list[tuple[int, int]],
    *,
    dataset_offset: int,
    num_conversations: int,
    repeats: int = 1,
    only: Sequence[str] | None = None,
) -> list[PlannedPoint]:
    """Points in run order (repeat-major), with the offsets of the blog's single command.

    Repeat r > 0 of a point advances its offset by r x number (mod the dataset size), so repeats
    replay fresh conversations while the dataset has them; repeat 0 is exactly the blog's.
    """
    if repeats < 1:
        raise ConfigError(f"--repeats must be >= 1, got {repeats}")
    chosen = _select(points, only)
    planned: list[PlannedPoint] = []
    for repeat in range(repeats):
        offset = dataset_offset
        for index, (parallel, number) in enumerate(points):
            point_offset = offset
            offset += number
            if index not in chosen:
                continue
            if repeat:
                point_offset = (point_offset + repeat * number) % max(num_conversations, 1)
            planned.append(
                PlannedPoint(
                    point_id(parallel, number, repeat),
                    f"c{parallel}",
                    parallel,
                    number,
                    repeat,
                    point_offset,
                    _rotation(num_conversations, point_offset, number),
                )
            )
    return planned


def workload_key(*, dataset_sha256: str, sweep: dict[str, Any], profile: dict[str, Any]) -> str:
    serve = {k: v for k, v in (profile.get("serve") or {}).items() if k not in ("host", "port")}
    material = {
        "dataset_sha256": dataset_sha256,
        "points": [list(p) for p in sweep.get("points", [])],
        "dataset_offset": sweep.get("dataset_offset"),
        "max_tokens": sweep.get("max_tokens"),
        "multi_turn": sweep.get("multi_turn"),
        "max_turns": sweep.get("max_turns"),
        "ignore_eos": sweep.get("ignore_eos"),
        "extra_args": sweep.get("extra_args") or {},
        "model": profile.get("model"),
        "serve": serve,
        "build": profile.get("build"),
        "gpus": max(int(profile.get("gpus") or 0), 1),
    }
    blob = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- inputs


@dataclass
class DatasetFacts:
    path: Path | None
    sha256: str | None
    num_conversations: int
    num_turns: int
    manifest: dict[str, Any]
    built: bool


def _dataset(spec: str, *, build: bool) -> DatasetFacts:
    """Ensure (build or reuse) the dataset; with build=False (dry run) only inspect it."""
    path = Path(spec).expanduser()
    if build:
        try:
            from harness.dataset import ensure_dataset
        except ImportError:
            if not (path.suffix == ".json" and path.is_file()):
                raise
        else:
            info = ensure_dataset(spec)
            return DatasetFacts(
                Path(info.path),
                info.sha256,
                info.num_conversations,
                info.num_turns,
                dict(info.manifest or {}),
                True,
            )
    if path.suffix == ".json" and path.is_file():
        data = json.loads(path.read_text(encoding="utf-8"))
        conversations = data.get("conversations") or []
        turns = len(conversations[0]) if conversations else 0
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        return DatasetFacts(
            path, digest, len(conversations), turns, data.get("metadata") or {}, True
        )
    from harness.paths import DATASETS_DIR

    recipe = path if path.suffix in (".yaml", ".yml") else DATASETS_DIR / f"{spec}.yaml"
    if not recipe.is_file():
        raise DatasetError(
            f"dataset {spec!r}: no built JSON, recipe file or {DATASETS_DIR}/{spec}.yaml"
        )
    import yaml

    data = yaml.safe_load(recipe.read_text(encoding="utf-8")) or {}
    number, turns = int(data.get("number", 0)), int(data.get("num_turns", 0))
    return DatasetFacts(None, None, number, turns, {"recipe": str(recipe)}, False)


def _subsequent_turn_length(manifest: dict[str, Any]) -> int | None:
    for where in (manifest, manifest.get("recipe"), manifest.get("metadata")):
        if isinstance(where, dict) and where.get("subsequent_turn_length"):
            return int(where["subsequent_turn_length"])
    return None


def _turns(dataset_turns: int, max_turns: int | None) -> int:
    return min(dataset_turns, max_turns) if max_turns else dataset_turns


def _host_facts() -> dict[str, Any]:
    try:
        from harness.serve.server import host_facts

        return host_facts()
    except Exception:  # noqa: BLE001 - host facts are informational
        return {
            "hostname": socket.gethostname(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
        }


def _load_profile(profile: Any, overrides: Sequence[str]) -> Any:
    from harness.serve.profiles import Profile, load_profile

    if isinstance(profile, Profile):
        return load_profile(str(profile.source), overrides) if overrides else profile
    return load_profile(str(profile), overrides)


# --------------------------------------------------------------------------- progress


class Progress:
    """One live line per point on a TTY; quiet periodic log lines otherwise."""

    def __init__(self, echo: Echo, *, log_every_s: float = 30.0) -> None:
        self.echo = echo
        self.tty = sys.stdout.isatty()
        self.log_every_s = log_every_s
        self._last_log = 0.0

    def update(
        self, label: str, elapsed: float, done: tuple[int, int] | None, running: float | None
    ) -> None:
        conv = f"{done[0]}/{done[1]} conv" if done else "-/- conv"
        run = f"{running:.0f}" if running is not None else "-"
        line = f"  {label}: {elapsed:6.0f}s  {conv}  running {run}"
        if self.tty:
            sys.stdout.write("\r" + line.ljust(70))
            sys.stdout.flush()
        elif elapsed - self._last_log >= self.log_every_s:
            self._last_log = elapsed
            self.echo(line)

    def done(self) -> None:
        if self.tty:
            sys.stdout.write("\r" + " " * 70 + "\r")
            sys.stdout.flush()
        self._last_log = 0.0


# --------------------------------------------------------------------------- server handling


class _Interrupted(Exception):
    pass


def _warm_up(
    base_url: str,
    model: str,
    *,
    count: int,
    max_tokens: int,
    extra: dict[str, Any],
    timeout_s: float,
) -> list[str]:
    """Warm-up completions outside the scrape window; returns error strings (empty = fine)."""
    errors: list[str] = []
    session = requests.Session()
    session.trust_env = False
    for i in range(count):
        body = {
            "model": model,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "stream": False,
            "messages": [{"role": "user", "content": f"repro warm-up request {i}"}],
            **extra,
        }
        try:
            response = session.post(f"{base_url}/v1/chat/completions", json=body, timeout=timeout_s)
            if response.status_code != 200:
                errors.append(f"warm-up {i}: HTTP {response.status_code}")
        except requests.RequestException as exc:
            errors.append(f"warm-up {i}: {type(exc).__name__}")
    return errors


def _alive(server: Any) -> bool:
    try:
        return bool(server.alive())
    except Exception:  # noqa: BLE001
        return False


# --------------------------------------------------------------------------- one point


def run_point(
    plan: PlannedPoint,
    *,
    layout: RunLayout,
    server: Any,
    args: ClientArgs,
    turns: int,
    spec: Any,
    gpus: int,
    progress: Progress,
    expected_turn_tokens: int | None = None,
) -> PointRecord:
    """Run one point against a live server and return its (not yet written) record."""
    pdir = layout.point_dir(plan.point_id)
    pdir.mkdir(parents=True, exist_ok=True)
    out_dir = layout.evalscope_dir(plan.point_id)
    name = plan.point_id
    cmd = client_command(
        args,
        parallel=plan.parallel,
        number=plan.number,
        dataset_offset=plan.dataset_offset,
        name=name,
        outputs_dir=out_dir,
        executable=evalscope_executable(),
    )
    notes: list[str] = []
    reasons: list[str] = []

    warm = _warm_up(
        server.base_url,
        args.model,
        count=spec.warmup_requests,
        max_tokens=args.max_tokens,
        extra=args.extra_args,
        timeout_s=min(spec.point_timeout_s, 600.0),
    )
    notes += warm

    scraper = Scraper(f"{server.base_url}/metrics", spec.scrape_interval_s)
    scraper.scrape_now()  # start sample: after the warm-up, before the first request
    scraper.start()
    log_path = pdir / "client.log"

    def tick(elapsed: float) -> None:
        progress.update(plan.label, elapsed, conversations_done(log_path), scraper.last_running)

    try:
        child = run_child(
            cmd, log_path=log_path, timeout_s=spec.point_timeout_s, env=client_env(), on_tick=tick
        )
    finally:
        scraper.stop()
        progress.done()
    scraper.scrape_now()  # end sample
    samples, gaps = scraper.snapshot()
    write_samples_csv(layout.samples_csv(plan.point_id), samples)
    if gaps:
        atomic_write_json(pdir / "scrape_gaps.json", [g.__dict__ for g in gaps])

    server_alive = _alive(server)
    if child.timed_out:
        reasons.append(f"client timed out after {spec.point_timeout_s:.0f}s (process group killed)")
    elif child.exit_code != 0:
        reasons.append(f"client exited with code {child.exit_code}")
    if not server_alive:
        reasons.append("server died during the point")

    ev_dir = point_output_dir(out_dir, name, plan.parallel, plan.number)
    client = None
    try:
        client = read_summary(ev_dir)
    except ReproError as exc:
        reasons.append(str(exc))
    percentiles = read_percentiles(ev_dir)
    timings = read_requests(ev_dir)
    expected = plan.number * turns
    if client is not None:
        if client.failed_requests:
            reasons.append(f"EvalScope reported {client.failed_requests} failed requests")
        if client.total_requests != expected:
            reasons.append(
                f"total requests {client.total_requests} != "
                f"{plan.number} conversations x {turns} turns = {expected}"
            )
        elif client.success_requests != expected:
            reasons.append(f"success requests {client.success_requests} != {expected}")

    derived = derive_point_metrics(
        samples,
        client=client,
        percentiles=percentiles,
        requests=timings,
        parallel=plan.parallel,
        gpus=gpus,
    )
    if derived.counter_resets:
        reasons.append(
            f"server counters reset {derived.counter_resets}x in the window (server restarted)"
        )
    if derived.metrics.get("occupancy") is None:
        notes.append("no non-zero vllm:num_requests_running sample: occupancy is null")

    # Exact request window on the epoch clock, via the monotonic offset at child start.
    offset = child.started_at - child.started_mono
    ends = [t.end for t in timings if t.end is not None]
    if timings and ends:
        window = (min(t.start for t in timings) + offset, max(ends) + offset)
    else:
        window = (child.started_at, child.ended_at)
    busy = window[1] - window[0] if timings else None
    fidelity = check_fidelity(
        read_request_bodies(ev_dir), expected_turn_tokens=expected_turn_tokens
    )
    fidelity.update(derived.info)
    notes += fidelity.get("warnings", [])

    return PointRecord(
        point_id=plan.point_id,
        label=plan.label,
        parallel=plan.parallel,
        number=plan.number,
        repeat=plan.repeat,
        dataset_offset=plan.dataset_offset,
        conversations=plan.conversations,
        turns=turns,
        expected_requests=expected,
        started_at=child.started_at,
        ended_at=child.ended_at,
        window=window,
        valid=not reasons,
        invalid_reasons=reasons,
        client=client,
        metrics=derived.metrics,
        samples=scraper.scrapes_ok,
        scrape_gaps=len(gaps),
        client_command=cmd,
        client_exit_code=child.exit_code,
        overhead_s=(child.ended_at - child.started_at - busy) if busy is not None else None,
        server_restarts=derived.counter_resets,
        fidelity=fidelity,
        notes=notes,
    )


# --------------------------------------------------------------------------- summary


def repeat_aggregates(points: list[PointRecord]) -> list[dict[str, Any]]:
    """Per (parallel, number): median and CI of every metric over the valid repeats."""
    groups: dict[tuple[int, int], list[PointRecord]] = {}
    for p in points:
        groups.setdefault((p.parallel, p.number), []).append(p)
    rows = []
    for (parallel, number), members in sorted(groups.items()):
        valid = [p for p in members if p.valid]
        row: dict[str, Any] = {
            "point": point_id(parallel, number, 0)[:-3],
            "label": members[0].label,
            "parallel": parallel,
            "number": number,
            "repeats": len(members),
            "valid_repeats": len(valid),
        }
        for key in METRICS:
            values = [p.metrics[key] for p in valid if p.metrics.get(key) is not None]
            if values:
                med, low, high = median_ci(values)
                row[key], row[f"{key}_ci_low"], row[f"{key}_ci_high"] = med, low, high
            else:
                row[key] = row[f"{key}_ci_low"] = row[f"{key}_ci_high"] = None
        rows.append(row)
    return rows


def write_run_summary(
    layout: RunLayout, run_id: str, points: list[PointRecord], repeats: int
) -> None:
    summary = write_summary(layout, run_id, points)
    if repeats > 1:
        aggregates = repeat_aggregates(points)
        summary.aggregates = aggregates
        atomic_write_json(layout.summary_json, summary)
        atomic_write_text(layout.root / "summary_repeats.csv", rows_to_csv(aggregates))


def summary_table(points: list[PointRecord]) -> str:
    cols = [
        ("point", 16),
        ("valid", 7),
        ("occupancy", 11),
        ("interactivity", 15),
        ("tput/GPU", 11),
        ("TPOT ms", 10),
        ("accept", 8),
        ("preempt", 8),
    ]
    lines = ["".join(name.ljust(width) for name, width in cols)]

    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}" if abs(value) < 1000 else f"{value:.0f}"

    for p in sorted(points, key=lambda p: (p.repeat, p.parallel, p.number)):
        m = p.metrics
        cells = [
            p.point_id,
            "yes" if p.valid else "NO",
            fmt(m.get("occupancy")),
            fmt(m.get("interactivity")),
            fmt(m.get("throughput_per_gpu")),
            fmt(m.get("mean_tpot_ms")),
            fmt(m.get("mtp_acceptance_length")),
            fmt(m.get("preemptions")),
        ]
        lines.append("".join(c.ljust(w) for c, (_, w) in zip(cells, cols, strict=True)))
    return "\n".join(lines)


# --------------------------------------------------------------------------- the sweep


def _finished_points(layout: RunLayout) -> dict[str, PointRecord]:
    done = {}
    for path in sorted(layout.points_dir.glob("*/point.json")):
        record = read_point(path)
        done[record.point_id] = record
    return done


def _set_aside_unfinished(layout: RunLayout, pid: str) -> None:
    """A point dir without point.json is a half-run attempt: keep it, out of the way."""
    pdir = layout.point_dir(pid)
    if pdir.exists() and not (pdir / "point.json").exists():
        attempts = layout.root / "attempts"
        attempts.mkdir(exist_ok=True)
        n = len(list(attempts.glob(f"{pid}-*")))
        pdir.rename(attempts / f"{pid}-{n}")


def _print_plan(
    echo: Echo,
    *,
    profile: Any,
    planned: list[PlannedPoint],
    ds: DatasetFacts,
    turns: int,
    args: ClientArgs,
    serve_cmd: list[str] | None,
    url: str | None,
    run_dir: Path,
    spec: Any,
) -> None:
    echo(f"plan for profile {profile.name} -> {run_dir}")
    if url:
        echo(f"server: attach to {url}")
    else:
        echo(f"server ({profile.build}): {shlex.join(serve_cmd or [])}")
    ds_where = ds.path if ds.path else f"{ds.manifest.get('recipe')} (not built yet)"
    echo(f"dataset: {ds_where}; {ds.num_conversations} conversations x {ds.num_turns} turns")
    echo(
        f"warm-up: {spec.warmup_requests} requests before each point; scrape every "
        f"{spec.scrape_interval_s}s; timeout {spec.point_timeout_s:.0f}s per point"
    )
    seen: dict[int, str] = {}
    for plan in planned:
        reused = sorted({seen[c] for c in plan.conversations if c in seen})
        conv = _ranges(plan.conversations)
        extra = f"  reuses conversations of {', '.join(reused)}" if reused else ""
        echo(
            f"  {plan.point_id} ({plan.label}): offset {plan.dataset_offset}, "
            f"{plan.number} conversations [{conv}], {plan.number * turns} requests{extra}"
        )
        for c in plan.conversations:
            seen.setdefault(c, plan.point_id)
    if planned:
        first = planned[0]
        cmd = client_command(
            args,
            parallel=first.parallel,
            number=first.number,
            dataset_offset=first.dataset_offset,
            name=first.point_id,
            outputs_dir=run_dir / "points" / first.point_id / "evalscope",
            executable="evalscope",
        )
        echo("client (first point): " + " ".join(_quote(c) for c in cmd))


def _quote(arg: str) -> str:
    return f"'{arg}'" if any(ch in arg for ch in ' {}"') else arg


def _ranges(values: list[int]) -> str:
    parts, start, prev = [], None, None
    for v in values:
        if start is None:
            start = prev = v
        elif v == prev + 1:
            prev = v
        else:
            parts.append(f"{start}-{prev}" if start != prev else str(start))
            start = prev = v
    if start is not None:
        parts.append(f"{start}-{prev}" if start != prev else str(start))
    return ", ".join(parts)


def run_sweep(
    profile: Any,
    *,
    overrides: Sequence[str] = (),
    dataset: str | None = None,
    url: str | None = None,
    out: Path | None = None,
    run_id: str | None = None,
    resume: Path | None = None,
    dry_run: bool = False,
    fail_fast: bool = False,
    repeats: int = 1,
    only_points: Sequence[str] | None = None,
    report: bool = True,
    echo: Echo = click.echo,
    port: int | None = None,
) -> Path:
    """Run (or plan, or resume) a sweep; returns the run directory.

    `port` (engine vllm only) overrides the profile's port for this run; it does not enter the
    workload key.
    """
    manifest: RunManifest | None = None
    if resume is not None:
        resume = Path(resume)
        manifest = read_manifest(resume)
        if manifest.status == "complete":
            raise RunError(f"{resume}: run is complete; a finished run is never overwritten")
        given = None if profile is None else getattr(profile, "name", str(profile))
        if given is not None and manifest.profile_name not in (given, Path(given).stem):
            raise RunError(
                f"{resume}: the run used profile {manifest.profile_name!r}, not "
                f"{profile!r}; --resume takes the run's own profile (omit --profile)"
            )
        from harness.serve.profiles import Profile

        prof = Profile.model_validate(manifest.profile)
        overrides = list(manifest.overrides)
        url = manifest.base_url if manifest.engine == "url" else None
        if url is None and port is None:  # relaunch where the run's server was
            from urllib.parse import urlparse

            port = urlparse(manifest.base_url).port
        repeats = manifest.repeats
        dataset_spec = manifest.dataset.get("path")
        run_dir = resume
    else:
        prof = _load_profile(profile, overrides)
        dataset_spec = dataset or prof.sweep.dataset
        rid = run_id or f"{prof.name}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
        run_dir = Path(out or results_dir()) / rid
        if run_dir.exists() and not dry_run:
            raise RunError(
                f"{run_dir}: already exists; a run is never overwritten "
                "(use --resume to continue it, or another --run-id)"
            )
    spec = prof.sweep
    gpus = max(int(prof.gpus), 1)

    ds = _dataset(str(dataset_spec), build=not dry_run)
    if manifest is not None and ds.sha256 != manifest.dataset.get("sha256"):
        raise RunError(
            f"{run_dir}: dataset {ds.path} has sha256 {ds.sha256}, the run used "
            f"{manifest.dataset.get('sha256')}"
        )
    turns = _turns(ds.num_turns, spec.max_turns)
    planned = plan_points(
        [tuple(p) for p in spec.points],
        dataset_offset=spec.dataset_offset,
        num_conversations=ds.num_conversations,
        repeats=repeats,
        only=only_points,
    )
    if manifest is not None:
        planned = [p for p in planned if p.point_id in set(manifest.planned_points)] or planned
    extra = {"ignore_eos": True} if spec.ignore_eos else {}
    extra.update(spec.extra_args)

    def client_args(model: str, base_url: str) -> ClientArgs:
        return ClientArgs(
            model=model,
            base_url=base_url,
            dataset_path=ds.path or Path("<dataset>"),
            max_tokens=spec.max_tokens,
            multi_turn=spec.multi_turn,
            max_turns=spec.max_turns,
            extra_args=extra,
        )

    if dry_run:
        serve_cmd = None
        if not url:
            from harness.serve.profiles import render_serve_command

            serve_cmd = render_serve_command(prof, port=port)
        base = (url or f"http://{prof.host}:{port or prof.port}").rstrip("/").removesuffix("/v1")
        _print_plan(
            echo,
            profile=prof,
            planned=planned,
            ds=ds,
            turns=turns,
            args=client_args(prof.served_model_name, base),
            serve_cmd=serve_cmd,
            url=url,
            run_dir=run_dir,
            spec=spec,
        )
        echo("dry run: nothing written")
        return run_dir

    layout = RunLayout(run_dir)
    profile_dump = prof.model_dump(mode="json")
    sweep_dump = spec.model_dump(mode="json")
    if manifest is None:
        run_dir.mkdir(parents=True, exist_ok=False)
        manifest = RunManifest(
            run_id=run_dir.name,
            status="running",
            created_at=time.time(),
            harness_version=__version__,
            engine="url" if url else "vllm",
            base_url=url or f"http://{prof.host}:{port or prof.port}",
            profile_name=prof.name,
            profile=profile_dump,
            overrides=list(overrides),
            gpus=gpus,
            dataset={
                "spec": str(dataset_spec),
                "path": str(ds.path),
                "sha256": ds.sha256,
                "num_conversations": ds.num_conversations,
                "num_turns": ds.num_turns,
                # per-conversation detail stays in the dataset's own manifest file
                "manifest": {k: v for k, v in ds.manifest.items() if k != "conversations"},
            },
            workload_key=workload_key(
                dataset_sha256=ds.sha256 or "", sweep=sweep_dump, profile=profile_dump
            ),
            client={
                "name": "evalscope",
                "version": client_version(),
                "executable": str(evalscope_executable()),
            },
            host=_host_facts(),
            sweep=sweep_dump,
            planned_points=[p.point_id for p in planned],
            repeats=repeats,
        )
    else:
        manifest.status = "running"
        manifest.notes.append(f"resumed at {time.time():.0f}")
    atomic_write_json(layout.manifest, manifest)

    finished = _finished_points(layout)
    todo = [p for p in planned if p.point_id not in finished]
    echo(
        f"run {manifest.run_id}: {len(planned)} points ({len(finished)} already finished) "
        f"-> {run_dir}"
    )

    server: Any = None
    status = "failed"
    previous_sigterm = None
    if threading_main():

        def on_sigterm(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        previous_sigterm = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        server = _start_server(prof, layout, url, echo, port)
        base_url = server.base_url
        model = getattr(server, "served_model_name", None) or prof.served_model_name
        manifest.base_url = base_url
        if not url:
            manifest.serve_command = list(server.command)
            launch = server.provenance()
            manifest.launch = launch
            manifest.build = launch.get("build") if isinstance(launch, dict) else None
        else:
            manifest.launch = server.provenance()
        manifest.client["command_template"] = client_command(
            client_args(model, base_url),
            parallel="<parallel>",
            number="<number>",  # type: ignore[arg-type]
            dataset_offset="<offset>",  # type: ignore[arg-type]
            name="<point>",
            outputs_dir=Path("<point dir>/evalscope"),
            executable="evalscope",
        )
        atomic_write_json(layout.manifest, manifest)

        args = client_args(model, base_url)
        progress = Progress(echo)
        expected_turn = _subsequent_turn_length(ds.manifest)
        points = list(finished.values())
        stopped_early = False
        for index, plan in enumerate(todo):
            if index:
                time.sleep(spec.sleep_between_points_s)
            if not _alive(server):
                if url:
                    raise ServerError(f"{url}: server not reachable before {plan.point_id}")
                echo(f"server not alive before {plan.point_id}: restarting")
                server.restart()
            _set_aside_unfinished(layout, plan.point_id)
            echo(
                f"{plan.point_id} ({plan.label}): offset {plan.dataset_offset}, "
                f"{plan.number} conversations x {turns} turns"
            )
            record = run_point(
                plan,
                layout=layout,
                server=server,
                args=args,
                turns=turns,
                spec=spec,
                gpus=gpus,
                progress=progress,
                expected_turn_tokens=int(expected_turn) if expected_turn else None,
            )
            if not _alive(server) and not url:
                echo(f"  server died during {plan.point_id}: restarting")
                record.notes.append("server restarted after this point")
                if not fail_fast:
                    server.restart()
            atomic_write_json(layout.point_json(plan.point_id), record)
            points.append(record)
            write_run_summary(layout, manifest.run_id, points, repeats)
            m = record.metrics
            state = "valid" if record.valid else "INVALID: " + "; ".join(record.invalid_reasons)
            echo(
                f"  {plan.point_id}: {state}; occupancy {_fmt(m.get('occupancy'))}, "
                f"interactivity {_fmt(m.get('interactivity'))}, tput/GPU "
                f"{_fmt(m.get('throughput_per_gpu'))}, samples {record.samples}, "
                f"gaps {record.scrape_gaps}"
            )
            if fail_fast and not record.valid:
                stopped_early = True
                break
        status = "failed" if stopped_early else "complete"
    except KeyboardInterrupt:
        status = "partial"
        echo("interrupted: stopping the client and the server; finished points are kept")
        raise
    except ReproError:
        status = "partial" if _finished_points(layout) else "failed"
        raise
    finally:
        if server is not None and not url:
            try:
                server.stop()
            except Exception as exc:  # noqa: BLE001
                echo(f"warning: stopping the server failed: {exc}")
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)
        manifest.status = status  # type: ignore[assignment]
        manifest.finished_at = time.time()
        atomic_write_json(layout.manifest, manifest)

    all_points = list(_finished_points(layout).values())
    write_run_summary(layout, manifest.run_id, all_points, repeats)
    echo(summary_table(all_points))
    if report:
        _report(run_dir, echo)
    return run_dir


def threading_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _fmt(value: float | None) -> str:
    return (
        "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.2f}"
    )


def _start_server(
    prof: Any, layout: RunLayout, url: str | None, echo: Echo, port: int | None = None
) -> Any:
    from harness.serve.server import AttachedServer, VllmServer

    if url:
        server = AttachedServer(url)
        if not server.alive():
            raise ServerError(f"--url {url}: /health did not answer")
        echo(f"attached to {server.base_url} (model {server.served_model_name})")
        return server
    echo(f"starting vLLM ({prof.build}) for profile {prof.name}; log: {layout.server_log}")
    server = VllmServer(prof, log_path=layout.server_log, port=port, echo=echo)
    try:
        server.start()
    except BaseException:
        server.stop()
        raise
    echo(f"server ready at {server.base_url}")
    return server


def _report(run_dir: Path, echo: Echo) -> None:
    """The HTML report and the run's figures (HTML, PNG, SVG); a failure here is reported,
    never fatal: the run's results are already written."""
    try:
        from harness.report.dashboard import write_report
    except ImportError:
        echo("report: harness.report.dashboard is not available; the summary table above stands in")
        return
    try:
        path = write_report([run_dir])
        echo(f"report: {path}")
    except ReproError as exc:
        echo(f"report failed: {exc}")
    from harness.report.images import write_run_figures

    try:
        written, skipped = write_run_figures(run_dir)
    except ReproError as exc:
        echo(f"figures failed: {exc}")
        return
    echo(f"figures: {', '.join(p.name for p in written)} in {run_dir / 'figures'}")
    if skipped:
        echo(f"figures: PNG/SVG skipped: {skipped}")


# --------------------------------------------------------------------------- repro runs


def list_runs(out: Path | None = None) -> list[str]:
    root = Path(out or results_dir())
    lines = [f"{'run':40} {'status':9} {'profile':20} {'valid/done/planned':19} workload"]
    for manifest_path in sorted(root.glob("*/manifest.json")):
        try:
            run = load_run(manifest_path.parent)
        except ReproError as exc:
            lines.append(f"{manifest_path.parent.name:40} unreadable: {exc}")
            continue
        m = run.manifest
        counts = f"{len(run.valid_points())}/{len(run.points)}/{len(m.planned_points)}"
        lines.append(f"{m.run_id:40} {m.status:9} {m.profile_name:20} {counts:19} {m.workload_key}")
    return lines


def show_run(run: Path) -> str:
    path = Path(run)
    if not path.is_dir():
        path = results_dir() / str(run)
    if not path.is_dir():
        raise RunError(f"{run}: no such run directory (nor under {results_dir()})")
    loaded = load_run(path)
    m = read_manifest(path)
    head = [
        f"run {m.run_id}  status {m.status}  profile {m.profile_name}  engine {m.engine}",
        (
            f"dataset sha256 {m.dataset.get('sha256')}  workload {m.workload_key}  "
            f"client {m.client.get('name')} {m.client.get('version')}"
        ),
    ]
    if m.overrides:
        head.append("overrides: " + " ".join(m.overrides))
    return "\n".join(head + [summary_table(loaded.points)])
