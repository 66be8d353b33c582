"""`repro export RUN --format vllm-bench|guidellm|csv`: a run in other tools' formats.

The formats, field by field, are documented in harness/analysis/export.py (and docs/export.md).
"""

from __future__ import annotations

from pathlib import Path

import click

from harness.cli.options import path_option, text_option


@click.command("export")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--format",
    "fmt",
    required=True,
    type=click.Choice(["vllm-bench", "guidellm", "csv"]),
    help="vllm-bench: JSON Lines as `vllm bench serve --save-result --append-result` writes; "
    "guidellm: a benchmarks.json report; csv: one row per request.",
)
@path_option("--out", "-o", help="Write here (default: standard output).", dir_okay=False)
@text_option(
    "--slo",
    metavar="OBJECTIVES",
    help="Objectives for vllm-bench's request_goodput, e.g. ttft=2s,tpot=50ms "
    "(default: the run's sweep.slo).",
)
def export_cmd(run_dir: Path, fmt: str, out: Path | None, slo: str | None) -> None:
    """Write RUN's per-request tables as another tool's result files."""
    from harness.analysis.export import export_run
    from harness.analysis.slo import parse_slo
    from harness.results import atomic_write_text, check_not_run_record, load_run
    from harness.run.config import configured_objectives

    if out is not None:
        check_not_run_record(out, "--out")
    run = load_run(run_dir)
    text = slo or configured_objectives(run)
    objectives = parse_slo(text, source="--slo" if slo else "sweep.slo") if text else None
    data = export_run(run, fmt, objectives)
    if out is None:
        click.echo(data, nl=False)
    else:
        atomic_write_text(out, data)
        click.echo(f"{fmt} written to {out}", err=True)


def register(group: click.Group) -> None:
    group.add_command(export_cmd)
