"""The `repro` command: click wiring only. Each area registers its commands from its own file."""

from __future__ import annotations

import sys

import click

from harness import __version__
from harness.cli import (
    capacity,
    cluster,
    coherence,
    dataset,
    doctor,
    launch,
    regress,
    report,
    sim_serve,
    simulate,
    sweep,
    tiny_models,
)
from harness.errors import ReproError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="repro")
def cli() -> None:
    """Reproduce and watch vLLM's Hybrid HiSparse result (GLM 5.3, 8xH200, OpenHands 13 turns).

    Flow: profile -> build -> server -> dataset -> sweep points -> /metrics samples ->
    metrics -> figures/dashboards -> compare/regress.
    """


for area in (
    launch,
    doctor,
    tiny_models,
    dataset,
    sweep,
    simulate,
    sim_serve,
    report,
    capacity,
    regress,
    coherence,
    cluster,
):
    area.register(cli)


def main() -> None:
    try:
        # standalone_mode=False returns ctx.exit() codes instead of exiting: propagate them.
        result = cli.main(standalone_mode=False)
    except ReproError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except OSError as exc:
        # a file the user named cannot be read or written (read-only file system, no such
        # folder, permission): one line naming the path, never a traceback; exit 2 like any
        # error, since 1 means "regression" / "incoherent" / "claim failed" to a gate
        where = f"{exc.filename}: " if exc.filename else ""
        click.echo(f"error: {where}{exc.strerror or exc}", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    sys.exit(result if isinstance(result, int) else 0)
