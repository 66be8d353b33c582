"""Build-once cache entries: a file lock per entry, build in a temp dir, rename into place."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

COMPLETE_MARKER = ".complete"


@contextmanager
def file_lock(lock_path: Path) -> Iterator[None]:
    """Exclusive advisory lock (blocks until free); released when the process dies."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def is_complete(entry: Path) -> bool:
    return (entry / COMPLETE_MARKER).is_file()


def ensure_entry(entry: Path, build: Callable[[Path], object]) -> Path:
    """Return `entry`, running `build(tmp_dir)` first if it is not there yet.

    Concurrent callers serialise on `<entry>.lock`; a crashed build leaves only a temp dir,
    never a half-written entry.
    """
    if is_complete(entry):
        return entry
    with file_lock(entry.with_name(entry.name + ".lock")):
        if is_complete(entry):
            return entry
        tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=entry.parent))
        try:
            build(tmp)
            (tmp / COMPLETE_MARKER).write_text("")
            tmp.chmod(0o755)
            if entry.exists():  # an incomplete leftover from an older layout or a manual copy
                shutil.rmtree(entry)
            os.replace(tmp, entry)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return entry
