"""The one check of every option and argument value, installed on the whole `repro` tree.

:func:`install` walks every command and gives each text-like parameter (strings and paths) a
callback that runs :mod:`harness.names` while click parses the command line, so a bad value is a
usage error (exit 2) before any command body runs and before anything is written:

- names that become one path component (``--run-id``) and lists of names (``--points c1,c8``,
  ``--profiles A,B``, the ARM of ``--arm ARM=RUN``) must match :data:`harness.names.NAME`;
- every other string or path (``--out``, ``--profile NAME|FILE``, ``--title``, ``--set``, RUN
  arguments) must be printable text: no control character, no bytes that are not UTF-8,
  at most :data:`harness.names.TEXT_MAX` characters. ``--pad-text`` may span lines;
- ``--url`` must also be a well-formed http(s)://HOST[:PORT].

A new command gets the check by being registered; `tests/cli/test_bad_input_round3.py` walks
the tree to prove each parameter has it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlparse

import click

from harness.errors import ConfigError
from harness.names import check_name, check_text

NAMES = {"run_id"}  # parameter names holding one name
NAME_LISTS = {"points", "only_points", "profiles"}  # comma-separated names
NAME_PAIRS = {"arms"}  # NAME=TEXT
MULTILINE = {"pad_text"}  # free text that may hold newlines and tabs
URLS = {"url"}  # http(s)://HOST[:PORT] of a server to attach to
_TEXT_TYPES = (click.types.StringParamType, click.Path)
MARK = "_repro_gate"


def _hint(param: click.Parameter) -> str:
    """The option as the user typed it (``--run-id``), or the argument's metavar (``RUN...``)."""
    if isinstance(param, click.Option):
        longs = [o for o in param.opts if o.startswith("--")]
        return (longs or param.opts)[0]
    return param.human_readable_name


def check_value(param: click.Parameter, value: str) -> None:
    """Raise ConfigError when ``value`` of ``param`` is unsafe (see the module docstring)."""
    name, what = param.name or "", _hint(param)
    text = str(value)
    if name in NAMES:
        check_name(text, what)
    elif name in NAME_LISTS:
        check_text(text, what)
        for item in (part.strip() for part in text.split(",")):
            if item:
                check_name(item, what)
    elif name in URLS:
        check_text(text, what)
        check_url(text, what)
    elif name in NAME_PAIRS:
        check_text(text, what)
        key, sep, _rest = text.partition("=")
        if sep:
            check_name(key, what)
    else:
        check_text(text, what, multiline=name in MULTILINE)


def check_url(text: str, what: str) -> None:
    """A well-formed http(s)://HOST[:PORT] (urlparse itself raises on "http://[::1")."""
    try:
        parsed = urlparse(text)
        parsed.port  # noqa: B018 - raises on a non-numeric or out-of-range port
        well_formed = parsed.scheme in ("http", "https") and bool(parsed.hostname)
    except ValueError:
        well_formed = False
    if not well_formed:
        raise ConfigError(f"{what} {text!r}: expected http://HOST:PORT (or https://)")


def _values(value: Any) -> Iterator[str]:
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, tuple | list):
        for item in value:
            yield from _values(item)
        return
    yield str(value)


def _guarded(param: click.Parameter, inner: Callable[..., Any] | None) -> Callable[..., Any]:
    def callback(ctx: click.Context, p: click.Parameter, value: Any) -> Any:
        if ctx.get_parameter_source(p.name or "") not in (
            click.core.ParameterSource.DEFAULT,
            None,
        ):  # defaults are the harness's own values
            for item in _values(value):
                try:
                    check_value(p, item)
                except ConfigError as exc:  # click's usage error names the option: exit 2
                    message = str(exc).removeprefix(_hint(p)).strip()
                    raise click.BadParameter(message, ctx=ctx, param=p) from None
        return inner(ctx, p, value) if inner is not None else value

    setattr(callback, MARK, True)
    return callback


def is_text_param(param: click.Parameter) -> bool:
    return isinstance(param.type, _TEXT_TYPES) and not getattr(param, "is_flag", False)


def walk(
    command: click.Command, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every command of the tree under ``command`` with its words (``("runs", "list")``);
    lazy groups load each area as they are asked for its commands."""
    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for word in command.list_commands(ctx):
            sub = command.get_command(ctx, word)
            if sub is not None:
                yield from walk(sub, (*path, word))


def install(root: click.Command) -> None:
    """Give every text-like parameter of the tree the check (once)."""
    for _path, command in walk(root):
        for param in command.params:
            if is_text_param(param) and not getattr(param.callback, MARK, False):
                param.callback = _guarded(param, param.callback)


def is_guarded(param: click.Parameter) -> bool:
    return bool(getattr(param.callback, MARK, False))


def given(name: str) -> bool:
    """Whether the user gave parameter ``name`` of the running command on the command line
    (not a default, not an environment variable such as REPRO_HISTORY for ``--db``): an
    option that does not apply is refused only when the user gave it."""
    source = click.get_current_context().get_parameter_source(name)
    return source in (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.PROMPT)
