"""CLI wiring for the sweep area: `repro sweep` and `repro runs list|show`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from harness import engines
from harness.cli.cluster import executor_options, options_from
from harness.cli.engine_options import EngineOptionsCommand
from harness.cli.options import flag, overrides_option, path_option, text_option
from harness.cluster.listing import list_runs
from harness.cluster.records import settle_job_run
from harness.cluster.submit import sweep_as_job
from harness.errors import ReproError
from harness.report.dashboard import write_report
from harness.report.images import write_run_figures
from harness.run.console import show_run
from harness.run.sweep import SweepRequest, run_sweep


def register(group: click.Group) -> None:
    """Add this area's commands to the `repro` group."""
    group.add_command(sweep)
    group.add_command(runs)


@click.command(cls=EngineOptionsCommand)
@text_option(
    "--profile",
    "profile",
    help="Profile name (launch/profiles/<name>.yaml) or a profile YAML path (required unless --resume, which takes the run's own).",
)
@text_option(
    "--dataset",
    metavar="RECIPE|FILE",
    help="Dataset recipe name/path or a built swe_smith JSON (default: the profile's).",
)
@path_option(
    "--out", help="Parent folder of the run directory (default: results/ or REPRO_RESULTS)."
)
@text_option("--run-id", help="Run directory name (default: <profile>-<UTC time>).")
@path_option(
    "--resume",
    exists=True,
    file_okay=False,
    help="Continue a partial run from its first unfinished point.",
)
@flag("--dry-run", help="Print the plan (points, offsets, conversations, commands); write nothing.")
@flag("--fail-fast", help="Stop at the first invalid point instead of restarting and continuing.")
@overrides_option(
    "Override one profile field for this run: serve.KEY=VALUE, sweep.KEY=VALUE or "
    "workload=NAME (VALUE is YAML; serve.KEY=null removes). Repeatable; recorded in the run."
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Run each point N times (fresh conversations where the dataset allows); the "
    "summary adds per-point median and 95% CI.",
)
@text_option(
    "--points",
    "only_points",
    metavar="c1,c8",
    help="Only these points (labels like c8), with the offsets of the full sweep.",
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Serve on this port instead of the profile's (launched server only).",
)
@flag(
    "--allow-incoherent",
    help="Count the points even when the profile's coherence check fails (recorded in the run).",
)
@text_option(
    "--coherence-against",
    metavar="RUN_DIR|PROFILE",
    help="Judge the arm's outputs against this run's coherence replies (or this arm's recorded "
    "ones) instead of the profile's coherence.reference (recorded in the run).",
)
@click.option(
    "--engine",
    type=click.Choice(engines.cli_choices()),
    default=engines.DEFAULT_CLI,
    show_default=True,
    help="vllm: launch the profile's build; sim: serve the simulated engine over HTTP "
    "(no GPUs; default dataset openhands-offline). Each engine takes its own options below.",
)
@flag("--no-report", help="Skip the HTML report and the figures at the end.")
@executor_options
@flag("--no-wait", help="slurm: submit and return (`repro runs list` follows it).")
def sweep(no_report: bool, executor: str, no_wait: bool, **options: Any) -> None:
    """Run the profile's workload (datasets/workloads/; the blog arms: c1..c32): launch the
    profile's vLLM build (or attach to --url), build or reuse the dataset, run one `evalscope
    perf` process per point while scraping /metrics, and write results/<run-id>/ (manifest with
    the whole run configuration, points/*/point.json, samples.csv, summary.json/csv).

    \b
    Examples:
      repro sweep --profile cpu-tiny-mtp
      repro sweep --profile hisparse384 --dry-run --allow-incoherent
      repro sweep --profile hisparse384 --coherence-against results/offload512-20261201-0100
      repro sweep --profile cpu-tiny --set serve.num-gpu-blocks-override=16 --repeats 3
      repro sweep --profile cpu-tiny --url http://127.0.0.1:8000 --points c1,c8
      repro sweep --resume results/cpu-tiny-20260101-000000
      repro sweep --profile hisparse384 --engine sim --time-scale 4
      repro sweep --profile hisparse384 --executor slurm --slurm-partition gpu --slurm-time 8:00:00
    """
    # Every option but the report/executor ones is a SweepRequest field of the same name or an
    # engine option (the registry's); what is left after taking those is the --slurm-* group.
    names = {f.name for f in dataclasses.fields(SweepRequest)}
    given = {key: options.pop(key) for key in list(options) if key in names}
    declared = [o for o in engines.declared_options() if o.name in options]
    engine_options = engines.given_options({o.name: options.pop(o.name) for o in declared})
    if given["profile"] is None and given["resume"] is None:
        raise click.UsageError("Missing option '--profile' (or --resume RUN_DIR to continue a run)")
    if given["resume"] is not None and (
        engine_options
        or any(given[k] for k in ("overrides", "dataset", "run_id", "coherence_against"))
    ):
        flags = ", ".join(["--set", "--dataset", *(o.flag for o in declared), "--run-id"])
        raise click.UsageError(
            f"--resume takes its settings from the run; drop {flags} and --coherence-against"
        )
    given["only_points"] = [given["only_points"]] if given["only_points"] else None
    request = SweepRequest(**given, engine_options=engine_options)
    if request.port and request.attached_url:
        raise click.UsageError(
            f"--port applies to a launched server; {request.attached_url} already names one"
        )
    slurm = options_from(executor, options)
    if slurm is None and no_wait:
        raise click.UsageError("--no-wait needs --executor slurm")
    if slurm is None and request.resume is not None:
        settle_job_run(request.resume)  # a run a Slurm job left: take Slurm's final word first
    if slurm is not None:
        sweep_as_job(request, slurm, report=not no_report, wait=not no_wait, echo=click.echo)
        return
    run_dir = run_sweep(request)
    if not request.dry_run and not no_report:
        write_run_report(run_dir, click.echo)


def write_run_report(run_dir: Path, echo: Callable[[str], None]) -> None:
    """The HTML report and the run's figures (HTML, PNG, SVG), after the run; a failure here is
    reported, never fatal: the run's results are already written."""
    try:
        echo(f"report: {write_report([run_dir])}")
    except ReproError as exc:
        echo(f"report failed: {exc}")
    try:
        written, skipped = write_run_figures(run_dir)
    except ReproError as exc:
        echo(f"figures failed: {exc}")
        return
    echo(f"figures: {', '.join(p.name for p in written)} in {run_dir / 'figures'}")
    if skipped:
        echo(f"figures: PNG/SVG skipped: {skipped}")


@click.group()
def runs() -> None:
    """List and inspect run directories."""


@runs.command("list")
@path_option("--out", help="Folder holding run directories (default: results/ or REPRO_RESULTS).")
def runs_list(out: Path | None) -> None:
    """One line per run: id, status, profile, points (valid/finished/planned), configuration key."""
    for line in list_runs(out):
        click.echo(line)


@runs.command("show")
@click.argument("run", type=click.Path(path_type=Path))
def runs_show(run: Path) -> None:
    """The summary table of RUN (a run directory, or a run id under results/)."""
    click.echo(show_run(run))
