"""mypy over all of `harness/` (the fast tier runs it), configured in pyproject.toml ([tool.mypy]):
the same check as a plain `mypy` at the repository root, sharing its incremental cache
(.mypy_cache), so a warm run takes a second or two and a cold one about 9 s of CPU.

Every `# type: ignore` under `harness/` names its error code and says why on the same line.
PENDING would list files that do not meet this (mypy errors or a bare ignore); it is empty, and
a listed file that is clean fails the test until it is taken out."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PENDING: set[str] = set()  # every file of harness/ is clean
ERROR = re.compile(r"^(?P<path>harness/[^:]+\.py):\d+: error: ", re.MULTILINE)
IGNORE = re.compile(r"#\s*type:\s*ignore(?P<code>\[[^\]]*\])?(?P<rest>.*)$")


def _bare_ignores() -> list[str]:
    """file:line of every `# type: ignore` without an error code or without a reason."""
    return [
        f"{p.relative_to(ROOT)}:{n}"
        for p in sorted((ROOT / "harness").rglob("*.py"))
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if (m := IGNORE.search(line)) and (not m.group("code") or not m.group("rest").strip(" #-"))
    ]


def test_mypy_is_clean_over_harness():
    result = subprocess.run(
        [sys.executable, "-m", "mypy"],  # files, options and the cache dir: pyproject.toml
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    # 0: clean, 1: type errors; anything else is a crash or a bad configuration
    assert result.returncode in (0, 1), result.stdout[-3000:] + result.stderr[-3000:]
    failing = {m.group("path") for m in ERROR.finditer(result.stdout)}
    assert failing - PENDING == set(), result.stdout[-6000:]
    bare = {where.rpartition(":")[0] for where in _bare_ignores()}
    assert PENDING - failing - bare == set(), "clean now: take these out of PENDING"


def test_every_type_ignore_names_its_code_and_says_why():
    assert [where for where in _bare_ignores() if where.rpartition(":")[0] not in PENDING] == []
