"""Result records on disk: atomic writes keep the usual file mode."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from harness.results import atomic_write_json, atomic_write_text


def test_atomic_writes_respect_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "a.txt", "x")
        atomic_write_json(tmp_path / "b.json", {"k": 1})
        os.umask(0o027)
        atomic_write_text(tmp_path / "c.txt", "y")
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes == {"a.txt": 0o644, "b.json": 0o644, "c.txt": 0o640}
    assert (tmp_path / "b.json").read_text() == '{\n  "k": 1\n}\n'
