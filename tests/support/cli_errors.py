"""The one shape of a refused command line: exit 2, no traceback, one `error:` line."""

from __future__ import annotations

import subprocess


def one_error_line(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2, no traceback, and exactly one `error:`/`Error:` line holding every needle."""
    assert result.returncode == 2, (result.returncode, result.stdout[-1000:], result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = [x for x in result.stderr.splitlines() if x.lower().startswith("error: ")]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]
