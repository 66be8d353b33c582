"""The code follows ruff's lint rules (as configured in pyproject.toml) and its formatter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUFF = [sys.executable, "-m", "ruff"]


def _ruff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RUFF, *args], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )


def test_ruff_check_passes():
    result = _ruff("check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_ruff_format_leaves_nothing_to_change():
    result = _ruff("format", "--check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
