"""An output path that cannot be written is one line naming it (exit 2: 1 means a regression to a gate), never a traceback, and
nothing else is lost (issue 17: read-only `--out`, `--markdown`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.crafted_runs import published_points, write_run

REPRO = [sys.executable, "-c", "from harness.cli import main; main()"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_run(tmp_path_factory.mktemp("runs"), "hisparse-run", published_points(0))


@pytest.mark.parametrize(
    "args",
    [
        ["report", "{run}", "--out", "{bad}/x.html"],
        ["figure", "{run}", "--out", "{bad}/x.html"],
        ["regress", "--candidate", "{run}", "--baseline", "{run}", "--markdown", "{bad}/v.md"],
    ],
    ids=["report", "figure", "regress"],
)
def test_unwritable_output_is_one_line_naming_the_path(
    args: list[str], run_dir: Path, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")  # root may write anywhere, but not below a file
    argv = [a.format(run=run_dir, bad=blocker) for a in args]
    result = subprocess.run([*REPRO, *argv], capture_output=True, text=True, check=False)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and str(blocker) in errors[0], result.stderr
    assert blocker.read_text() == "not a folder"
