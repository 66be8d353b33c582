"""`repro sweep`'s engine options, built from the engine registry (docs/engines.md §3): each
registered engine declares the options it accepts, and this module turns them into click
options. The registry's one check refuses an option the chosen engine does not accept."""

from __future__ import annotations

from typing import Any

import click

from harness import engines
from harness.cli.gate import install
from harness.cli.options import FINITE
from harness.engines import EngineOption


def _engine_click_option(option: EngineOption) -> click.Option:
    """The click option of one engine option (docs/engines.md §3); numbers must be finite."""
    value_type: Any = FINITE if option.value_type is float else option.value_type
    return click.Option(
        [option.flag, option.name],
        type=value_type,
        multiple=option.multiple,
        default=None,
        metavar=option.metavar,
        help=engines.option_help(option),
    )


def _set_items_help() -> list[str]:
    """What `--set` gives each engine (its options taken from `--set` items)."""
    return [
        f"{engines.option_help(o).split(':', 1)[0]}: {o.set_prefix}PARAM=VALUE, {o.help}"
        for o in engines.declared_options()
        if o.set_prefix
    ]


class EngineOptionsCommand(click.Command):
    """A command taking the registered engines' options: `--engine` offers every registered
    engine and each declared option is a flag, read again when a command line is parsed, so an
    engine registered after import (a plug-in, a test's) has its flags. Options taken from
    `--set` items have no flag of their own."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._engine_params: dict[str, click.Option] = {}  # the ones this class added
        self.sync_engine_options()

    def sync_engine_options(self) -> None:
        declared = [o for o in engines.declared_options() if o.set_prefix is None]
        names = {o.name for o in declared}
        for name in [n for n in self._engine_params if n not in names]:  # unregistered since
            self.params.remove(self._engine_params.pop(name))
        have = {p.name for p in self.params}
        at = next((i + 1 for i, p in enumerate(self.params) if p.name == "engine"), 0)
        for option in declared:
            if option.name not in have:
                added = self._engine_params[option.name] = _engine_click_option(option)
                self.params.insert(at, added)
            at += 1
        for param in self.params:
            if param.name == "engine" and isinstance(param.type, click.Choice):
                param.type = click.Choice(engines.cli_choices())
            if param.name == "overrides" and isinstance(param, click.Option):
                self._set_help = getattr(self, "_set_help", None) or param.help or ""
                param.help = " ".join([self._set_help, *_set_items_help()])
        install(self)  # the text check of every option, the new ones too (--url's form)

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        self.sync_engine_options()
        return super().get_params(ctx)
