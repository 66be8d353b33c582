"""The `repro` group imports an area only when one of its commands runs; the table of command
names (harness.cli.AREAS) must still name every command each area registers, no more."""

from __future__ import annotations

import importlib
import subprocess
import sys

import click

from harness.cli import AREAS, cli


def _eager_commands() -> dict[str, click.Command]:
    group = click.Group()
    for area in sorted({a for areas in AREAS.values() for a in areas}, key="sweep".__ne__):
        importlib.import_module(f"harness.cli.{area}").register(group)  # sweep first: `runs`
    return group.commands


def test_every_registered_command_is_in_the_table_and_resolves():
    eager = _eager_commands()
    ctx = click.Context(cli)
    assert sorted(cli.list_commands(ctx)) == sorted(eager)
    for name, command in eager.items():
        lazy = cli.get_command(ctx, name)
        assert lazy is not None and lazy.name == command.name, name
        if isinstance(command, click.Group):
            assert sorted(lazy.commands) == sorted(command.commands), name


def test_runs_keeps_cancel_whichever_command_loads_first():
    code = (
        "import click\n"
        "from harness.cli import cli\n"
        "ctx = click.Context(cli)\n"
        "cli.get_command(ctx, 'k8s')\n"
        "print(' '.join(sorted(cli.get_command(ctx, 'runs').commands)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.split() == ["cancel", "list", "show"]


def test_sim_serve_does_not_import_the_report_or_dataset_layers():
    code = (
        "import sys\n"
        "from harness.cli import cli\n"
        "import click\n"
        "cli.get_command(click.Context(cli), 'sim')\n"
        "print(' '.join(m for m in ('plotly', 'harness.report.dashboard', 'harness.dataset.builder')"
        " if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.strip() == ""
