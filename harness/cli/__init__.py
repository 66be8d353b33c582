"""The `repro` command: click wiring only. Each area registers its commands from its own file,
imported only when one of its commands runs: `repro sim serve` does not pay for the dashboard,
the dataset builder and plotly (seconds per invocation)."""

from __future__ import annotations

import importlib
import sys

import click

from harness import __version__
from harness.cli.gate import install
from harness.errors import ReproError
from harness.names import for_terminal

# command -> the areas (modules of harness.cli) that register it, in registration order
AREAS: dict[str, tuple[str, ...]] = {
    "build": ("launch",),
    "builds": ("launch",),
    "capacity": ("capacity",),
    "claims": ("regress",),
    "coherence": ("coherence",),
    "compare": ("report",),
    "dataset": ("dataset",),
    "doctor": ("doctor",),
    "export": ("export",),
    "figure": ("report",),
    "history": ("regress",),
    "k8s": ("sweep", "cluster"),  # cluster registers after sweep: it extends `runs`
    "launch": ("launch",),
    "model": ("tiny_models",),
    "nightly": ("regress",),
    "plan": ("plan",),
    "profiles": ("launch",),
    "regress": ("regress",),
    "report": ("report",),
    "runs": ("sweep", "cluster"),  # `runs cancel` joins sweep's `runs` group
    "sim": ("sim_serve",),
    "simulate": ("simulate",),
    "sweep": ("sweep",),
}


class LazyGroup(click.Group):
    """A group whose subcommands are registered by their area the first time one is needed."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._registered: set[str] = set()

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(AREAS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        for area in AREAS.get(cmd_name, ()):
            if area not in self._registered:
                self._registered.add(area)
                importlib.import_module(f"harness.cli.{area}").register(self)
        command = self.commands.get(cmd_name)
        if command is not None:
            install(command)  # every name and path option is checked while parsing
        return command


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="repro")
def cli() -> None:
    """Reproduce and watch vLLM's Hybrid HiSparse result (GLM 5.3, 8xH200, OpenHands 13 turns).

    Flow: profile -> build -> server -> dataset -> sweep points -> /metrics samples ->
    metrics -> figures/dashboards -> compare/regress.
    """


def _printable(message: object) -> str:
    """An error message as the terminal shows it: its lines kept, every control character in
    them (a run id or a path read from a file) escaped."""
    return "\n".join(for_terminal(line) for line in str(message).split("\n"))


def main() -> None:
    try:
        # standalone_mode=False returns ctx.exit() codes instead of exiting: propagate them.
        result = cli.main(standalone_mode=False)
    except ReproError as exc:
        click.echo(f"error: {_printable(exc)}", err=True)
        sys.exit(exc.exit_code)
    except OSError as exc:
        # a file the user named cannot be read or written (read-only file system, no such
        # folder, permission): one line naming the path, never a traceback; exit 2 like any
        # error, since 1 means "regression" / "incoherent" / "claim failed" to a gate
        where = f"{exc.filename}: " if exc.filename else ""
        click.echo(f"error: {_printable(where)}{exc.strerror or exc}", err=True)
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
