"""The one gate for names, and the escaping of text per medium it is shown in.

A *name* (run id, point id, profile or arm name, output name) becomes a path component and is
shown in tables, dashboards and PR comments, so it is held to one safe set: letters, digits and
``. _ + -``, starting with a letter or digit, at most :data:`NAME_MAX` characters. No separator,
no leading dot, no whitespace, markup or control character can pass.

Other text a user gives (paths, titles, KEY=VALUE overrides, URLs) may hold spaces and slashes,
but never control characters, lone surrogates (argv bytes that were not UTF-8) or more than
:data:`TEXT_MAX` characters: :func:`check_text`.

Whatever reaches a medium is escaped for it where it is rendered: :func:`for_html`,
:func:`for_plotly` (titles, legends, hover text: plotly renders a subset of HTML),
:func:`for_markdown_code` (a code span that no backtick, pipe or newline can leave) and
:func:`for_terminal` (control and bidirectional-format characters shown as escapes).
"""

from __future__ import annotations

import html
import re
import unicodedata

from harness.errors import ConfigError

NAME_MAX = 128
TEXT_MAX = 4096  # PATH_MAX on Linux; no option value the harness takes is longer
NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._+-]{{0,{NAME_MAX - 1}}}")
NAME_RULE = (
    "a name is letters, digits and . _ + - (starting with a letter or digit), "
    f"at most {NAME_MAX} characters"
)
# A profile's name is part of the run ids made from it: `sim-<name>-<YYYYmmdd-HHMMSS>`
# (harness/sim/run.py), `<name>-<stamp>-<n>` (harness/run/request.py, harness/run/sweep.py),
# `nightly-<stamp>-<name>-rerun` (harness/gate/nightly.py), up to 30 characters more.
PROFILE_NAME_MAX = NAME_MAX - 32


def is_name(value: object) -> bool:
    return isinstance(value, str) and NAME.fullmatch(value) is not None


def check_name(value: object, what: str, *, limit: int = NAME_MAX) -> str:
    """``value`` if it is a safe name of at most ``limit`` characters, else a ConfigError naming
    ``what`` and the value (escaped, so the message itself is one printable line)."""
    if not isinstance(value, str) or not is_name(value) or len(value) > limit:
        rule = NAME_RULE.replace(f"at most {NAME_MAX}", f"at most {min(limit, NAME_MAX)}")
        raise ConfigError(f"{what} {for_terminal(repr(value))}: {rule}")
    return value


def text_problem(value: str, *, multiline: bool = False) -> str | None:
    """Why ``value`` is not acceptable free text (a path, a title, an override), or None."""
    if len(value) > TEXT_MAX:
        return f"{len(value):,} characters; at most {TEXT_MAX:,}"
    for char in value:
        if multiline and char in "\n\t":
            continue
        if 0xD800 <= ord(char) <= 0xDFFF:
            return "not valid UTF-8"
        if _unsafe(char):
            return f"holds the control character {char!r}"
    return None


def check_text(value: str, what: str, *, multiline: bool = False) -> str:
    problem = text_problem(value, multiline=multiline)
    if problem:
        shown = value if len(value) <= 80 else value[:80] + "..."
        raise ConfigError(f"{what} {for_terminal(repr(shown))}: {problem}")
    return value


# ------------------------------------------------------------------ escaping per medium


def _unsafe(char: str) -> bool:
    """A character a terminal or a renderer may act on: C0/C1 controls, DEL, and format
    characters (bidirectional overrides such as U+202E, zero-width joiners)."""
    return unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp")


def _escape_char(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def for_terminal(text: object) -> str:
    """``text`` with every control or format character written as an escape (``\\x1b``), so
    printing it cannot move the cursor, change colours or reorder the line."""
    value = str(text)
    if not any(_unsafe(c) for c in value):
        return value
    return "".join(_escape_char(c) if _unsafe(c) else c for c in value)


def for_html(text: object) -> str:
    """Text for an HTML element or attribute (quotes included), terminal-safe as well."""
    return html.escape(for_terminal(text), quote=True)


def for_plotly(text: object) -> str:
    """Text for a plotly title, legend entry, axis label or hover text. Plotly renders
    ``<b>``, ``<br>``, ``<a href>`` and entities in these strings, so ``& < >`` become
    entities (plotly shows them as the characters)."""
    return for_html(text).replace("&#x27;", "'")


def for_markdown_code(text: object) -> str:
    """A markdown code span holding ``text`` literally, safe inside a table cell: newlines and
    controls become escapes, ``|`` is escaped for the table, and the fence is one backtick
    longer than the longest run of backticks inside."""
    value = for_terminal(str(text).replace("\r", "\n")).replace("\n", "\\n")
    value = value.replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", value)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if value.startswith("`") or value.endswith("`") or not value else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def for_markdown(text: object) -> str:
    """Plain markdown text on one line (a list item, a table cell): newlines become spaces,
    HTML is shown as text, and ``|`` and backticks cannot end a cell or open a code span."""
    value = for_terminal(str(text).replace("\r", " ").replace("\n", " "))
    value = html.escape(value, quote=False)
    return value.replace("|", "\\|").replace("`", "\\`")
