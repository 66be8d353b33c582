"""Option declarations that many commands share, so each command states only what differs."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]

PORT = click.IntRange(1, 65535)  # else a bad port is a traceback from bind() after the setup


class FiniteFloat(click.ParamType):
    """A float that is a number: nan and inf are refused (click's float takes them, and they
    reach arithmetic that either raises or prints nonsense); optionally at most ``maximum``,
    at least ``minimum``, and above ``above`` (an open lower bound, e.g. a time scale > 0)."""

    name = "FLOAT"

    def __init__(
        self,
        maximum: float | None = None,
        *,
        minimum: float | None = None,
        above: float | None = None,
    ) -> None:
        self.maximum = maximum
        self.minimum = minimum
        self.above = above

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if self.maximum is not None and number > self.maximum:
            self.fail(f"{value!r} is more than {self.maximum:,.0f}", param, ctx)
        if self.minimum is not None and number < self.minimum:
            self.fail(f"{value!r} is less than {self.minimum:g}", param, ctx)
        if self.above is not None and not number > self.above:
            self.fail(f"{value!r} must be more than {self.above:g}", param, ctx)
        return number


FINITE = FiniteFloat()
GIB = FiniteFloat(maximum=2.0**30)  # GiB sizes: 1 EiB is beyond any machine, and far more overflows


def path_option(*decls: str, help: str, **path: Any) -> Decorator:
    """An option holding a filesystem path (a `Path`; default None). `path` keys go to
    click.Path (exists, file_okay, dir_okay, writable); `default`, `metavar`, `required` and
    `show_default` to the option."""
    option_keys = {k: path.pop(k) for k in ("default", "metavar", "required", "show_default")
                   if k in path}  # fmt: skip
    option_keys.setdefault("default", None)
    return click.option(*decls, type=click.Path(path_type=Path, **path), help=help, **option_keys)


def overrides_option(help: str) -> Decorator:
    """`--set KEY=VALUE`, repeatable, into the `overrides` parameter."""
    return click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help=help)


def json_flag(help: str = "Print JSON instead of text.") -> Decorator:
    return click.option("--json", "as_json", is_flag=True, help=help)


def flag(*decls: str, help: str) -> Decorator:
    """An on/off option (False unless given)."""
    return click.option(*decls, is_flag=True, help=help)


def text_option(*decls: str, help: str, metavar: str | None = None) -> Decorator:
    """An optional string option (None unless given)."""
    return click.option(*decls, default=None, metavar=metavar, help=help)
