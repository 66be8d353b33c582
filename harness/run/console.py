"""What a sweep prints: the plan, live progress, one line per point, the summary table, and
`repro runs show` (`repro runs list` joins runs with scheduler jobs: `harness.cluster.listing`)."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from harness.client.evalscope import ClientArgs
from harness.client.plan import PlannedPoint
from harness.coherence import coherence_line
from harness.errors import RunError
from harness.paths import results_dir
from harness.results import PointRecord, load_run, read_manifest
from harness.run.inputs import DatasetFacts
from harness.serve.profiles import Profile
from harness.text import fmt_number, int_ranges

Echo = Callable[[str], None]


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


def point_line(record: PointRecord) -> str:
    m = record.metrics
    state = "valid" if record.valid else "INVALID: " + "; ".join(record.invalid_reasons)
    return (
        f"  {record.point_id}: {state}; occupancy {fmt_number(m.get('occupancy'), fixed=2)} "
        f"(engine {fmt_number(m.get('engine_occupancy'), fixed=2)}), "
        f"interactivity {fmt_number(m.get('interactivity'), fixed=2)}, tput/GPU "
        f"{fmt_number(m.get('throughput_per_gpu'), fixed=2)}, samples {record.samples}, "
        f"gaps {record.scrape_gaps}"
    ) + "".join(f"\n    note: {note}" for note in record.notes)


def _quote(arg: str) -> str:
    return f"'{arg}'" if any(ch in arg for ch in ' {}"') else arg


def print_plan(
    echo: Echo,
    *,
    profile: Profile,
    planned: list[PlannedPoint],
    ds: DatasetFacts,
    turns: int,
    args: ClientArgs,
    serve_cmd: list[str] | None,
    url: str | None,
    run_dir: Path,
) -> None:
    spec = profile.sweep
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
        extra = f"  reuses conversations of {', '.join(reused)}" if reused else ""
        echo(
            f"  {plan.point_id} ({plan.label}): offset {plan.dataset_offset}, "
            f"{plan.number} conversations [{int_ranges(plan.conversations, sort=False)}], "
            f"{plan.number * turns} requests{extra}"
        )
        for c in plan.conversations:
            seen.setdefault(c, plan.point_id)
    if planned:
        first = planned[0]
        cmd = first.client_command(
            args,
            outputs_dir=run_dir / "points" / first.point_id / "evalscope",
            executable="evalscope",
        )
        echo("client (first point): " + " ".join(_quote(c) for c in cmd))


def summary_table(points: list[PointRecord]) -> str:
    cols = [
        ("point", 16),
        ("valid", 7),
        ("occupancy", 11),
        ("engine occ", 12),
        ("interactivity", 15),
        ("tput/GPU", 11),
        ("TPOT ms", 10),
        ("accept", 8),
        ("preempt", 8),
    ]
    lines = ["".join(name.ljust(width) for name, width in cols)]

    for p in sorted(points, key=lambda p: (p.repeat, p.parallel, p.number)):
        m = p.metrics
        cells = [
            p.point_id,
            "yes" if p.valid else "NO",
            fmt_number(m.get("occupancy"), fixed=2, whole_from=1000),
            fmt_number(m.get("engine_occupancy"), fixed=2, whole_from=1000),
            fmt_number(m.get("interactivity"), fixed=2, whole_from=1000),
            fmt_number(m.get("throughput_per_gpu"), fixed=2, whole_from=1000),
            fmt_number(m.get("mean_tpot_ms"), fixed=2, whole_from=1000),
            fmt_number(m.get("mtp_acceptance_length"), fixed=2, whole_from=1000),
            fmt_number(m.get("preemptions"), fixed=2, whole_from=1000),
        ]
        lines.append("".join(c.ljust(w) for c, (_, w) in zip(cells, cols, strict=True)))
    return "\n".join(lines)


def show_run(run: Path) -> str:
    path = Path(run)
    if not path.is_dir():
        path = results_dir() / str(run)
    if not path.is_dir():
        raise RunError(f"{run}: no such run directory (nor under {results_dir()})")
    loaded = load_run(path)
    m = read_manifest(path)
    head = [
        f"run {m.run_id}  status {m.status}  profile {m.profile_name}  engine {m.engine}"
        + (f" (time scale {m.time_scale:g})" if getattr(m, "time_scale", None) else ""),
        (
            f"dataset sha256 {m.dataset.get('sha256')}  configuration {m.configuration_key}  "
            f"client {m.client.get('name')} {m.client.get('version')}"
        ),
    ]
    if m.overrides:
        head.append("overrides: " + " ".join(m.overrides))
    if m.coherence is not None:
        head.append("coherence: " + coherence_line(m.coherence))
    if m.job:
        j = m.job
        head.append(
            f"slurm job {j.job_id} on {j.node} (partition {j.partition}): {j.state}"
            + (f" ({j.reason})" if j.reason else "")
        )
    return "\n".join(head + [summary_table(loaded.points)])
