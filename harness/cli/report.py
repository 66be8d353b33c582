"""CLI wiring for the report area: `repro report`, `repro compare`, `repro figure`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from harness.cli.options import flag, path_option, text_option

if TYPE_CHECKING:  # the CLI imports its areas' modules lazily
    from harness.analysis.slo import Objectives


def register(group: click.Group) -> None:
    """Add this area's commands to the `repro` group."""
    group.add_command(report)
    group.add_command(compare)
    group.add_command(figure)


@click.command()
@click.argument("runs", nargs=-1, required=True, metavar="RUN...")
@text_option(
    "--baseline",
    metavar="RUN",
    help="Run every ratio is taken against (default: the first RUN); added if not among RUN.",
)
@path_option(
    "--out",
    dir_okay=False,
    help="Output .html file (default: dashboards/<run>[-vs-<run>].html or REPRO_DASHBOARDS).",
)
@text_option("--title", help="Page title (default: from the runs' metadata).")
@click.option(
    "--predicted",
    "predicted",
    multiple=True,
    metavar="SIMRUN",
    help="A simulated run (repro simulate) to overlay on the real RUN: figures, tables and a "
    "static-limit / predicted / measured table per point. Repeatable.",
)
@text_option(
    "--slo",
    metavar="OBJECTIVES",
    help="Latency objectives, e.g. ttft=2s,tpot=50ms: per run, each point's attainment and "
    "goodput and the highest concurrency meeting them for >= 90 % of requests, recomputed from "
    "the per-request tables (default: each run's sweep.slo, as recorded).",
)
def report(
    runs: tuple[str, ...],
    baseline: str | None,
    out: Path | None,
    title: str | None,
    predicted: tuple[str, ...],
    slo: str | None,
) -> None:
    """Write one standalone, offline HTML dashboard for one or more runs.

    RUN is a run directory or a run id under results/. The page holds the blog's figure (with the
    published MTP3 values overlaid, labelled "published") and the bench-sweep view, per-point
    tables of every derived metric with ratios against the baseline, the scraped /metrics time
    series of every point, invalid points with their reasons, and each run's provenance.

    \b
    Examples:
      repro report results/cpu-tiny-20260101-000000
      repro report results/nightly-b --baseline results/nightly-a --out pr.html
      repro report results/cpu-tiny-pressure-x --predicted results/sim-cpu-tiny-pressure-x
    """
    from harness.analysis.slo import parse_slo
    from harness.report.dashboard import resolve_run_dir, write_report

    objectives = parse_slo(slo, source="--slo") if slo is not None else None
    dirs = [resolve_run_dir(r) for r in runs]
    base = resolve_run_dir(baseline) if baseline else None
    sims = [resolve_run_dir(r) for r in predicted]
    path = write_report(
        dirs, baseline=base, out=out, title=title, predicted=sims, objectives=objectives
    )
    _echo_objectives([*dirs, *([base] if base else [])], objectives)
    click.echo(str(path))


def _echo_objectives(dirs: list[Path], objectives: Objectives | None) -> None:
    """Per run with objectives, its highest concurrency meeting them (on stderr: stdout is
    the report's path, for scripts)."""
    from harness.report.tables import slo_lines, slo_rows
    from harness.results import load_run

    unique = list(dict.fromkeys(d.resolve() for d in dirs))
    for line in slo_lines(slo_rows([load_run(d) for d in unique], objectives)):
        click.echo(line, err=True)


@click.command()
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@flag("--json", "as_json", help="Print the rows as JSON instead of a table.")
@click.option(
    "--tolerance",
    type=click.FloatRange(min=0.0),
    default=None,
    help="Relative change under which two values count as the same [default: 0.02].",
)
@flag("--all", "include_empty", help="Also list metrics that neither run has.")
@text_option(
    "--slo",
    metavar="OBJECTIVES",
    help="Latency objectives, e.g. ttft=2s,tpot=50ms: also print each run's highest "
    "concurrency meeting them for >= 90 % of requests (default: each run's sweep.slo).",
)
def compare(
    a: str, b: str, as_json: bool, tolerance: float | None, include_empty: bool, slo: str | None
) -> None:
    """Compare run B against run A, point by point, for every derived metric.

    Points are matched by (parallel, number), repeats reduced to medians. Each row shows A, B,
    B-A, B/A and whether B is better or worse given the metric's direction (higher or lower is
    better); metrics without a direction are informational. A last block compares whole-curve
    scalars (frontier AUC under both definitions, best throughput, most requests running).
    Runs with different workloads (dataset, points, output length...) are compared with a
    warning on stderr. Exit status is 0 whatever the verdicts (use `repro regress` for a gate).

    \b
    Examples:
      repro compare results/run-a results/run-b
      repro compare run-a run-b --json | jq '.rows[] | select(.verdict=="worse")'
    """
    from harness.analysis.compare import (
        DEFAULT_TOLERANCE,
        compare_curves,
        compare_json,
        compare_runs,
        render_table,
        workload_warning,
    )
    from harness.analysis.slo import parse_slo
    from harness.report.dashboard import resolve_run_dir
    from harness.report.tables import slo_lines, slo_rows
    from harness.results import load_run

    objectives = parse_slo(slo, source="--slo") if slo is not None else None
    tol = DEFAULT_TOLERANCE if tolerance is None else tolerance
    run_a, run_b = load_run(resolve_run_dir(a)), load_run(resolve_run_dir(b))
    warning = workload_warning(run_a, run_b)
    if warning:
        click.echo(warning, err=True)
    rows = compare_runs(run_a, run_b, tolerance=tol)
    curves = compare_curves(run_a, run_b, tolerance=tol)
    if as_json:
        click.echo(compare_json(run_a, run_b, rows, tol, curves), nl=False)
    else:
        click.echo(
            render_table(
                [*rows, *curves], run_a.name, run_b.name, include_empty=include_empty, tolerance=tol
            ),
            nl=False,
        )
        for line in slo_lines(slo_rows([run_a, run_b], objectives)):
            click.echo(line)


@click.command()
@click.argument("runs", nargs=-1, required=True, metavar="RUN...")
@path_option(
    "--out",
    dir_okay=False,
    required=True,
    help="Output file; .png and .svg need kaleido and Chromium, .html needs nothing.",
)
@click.option(
    "--definition",
    type=click.Choice(["blog", "bench-sweep"]),
    default="blog",
    show_default=True,
    help="blog: 1000/mean TPOT vs total tok/s per GPU; bench-sweep: output tok/s per "
    "user vs output tok/s per GPU (vLLM bench sweep).",
)
@click.option(
    "--published/--no-published",
    default=True,
    show_default=True,
    help="Overlay the blog's published MTP3 values (blog definition only).",
)
@text_option("--title", help="Figure title (default: from the runs' metadata).")
def figure(
    runs: tuple[str, ...], out: Path, definition: str, published: bool, title: str | None
) -> None:
    """Write the two-panel figure (Pareto + mean running requests) for one or more runs.

    \b
    Examples:
      repro figure results/run-a results/run-b --out pareto.png
      repro figure results/run-a --out pareto.svg --definition bench-sweep
    Static export uses the system Chromium (apt-get install -y chromium, or BROWSER_PATH).
    """
    from harness.report.dashboard import resolve_run_dir
    from harness.report.figures import pareto_figure
    from harness.report.images import export_figure
    from harness.results import load_run

    loaded = [load_run(resolve_run_dir(r)) for r in runs]
    fig = pareto_figure(loaded, published=published, definition=definition, title=title)
    click.echo(str(export_figure(fig, out)))
