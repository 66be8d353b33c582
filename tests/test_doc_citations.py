"""Every document a comment, docstring or data file cites is in this repository: citations have
the form `docs/<page>.md §N`, the page exists and names that section; no file cites the notes
the project was developed from (a page of the same name outside `docs/`)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CITED = re.compile(r"docs/([a-z0-9-]+)\.md(?: §(\d+(?:\.\d+)?[a-z]?))?")
OUTSIDE = re.compile(
    r"(?<![\w./-])(?:shared/)?(?:reference/)?(?:DESIGN|vllm-cpu|sim|recipe|vllm|pitfalls|evalscope|anchors)\.md"
)
# Files still citing the old notes (none: the calibration file was regenerated).
PENDING: set[str] = set()
SUFFIXES = {".py", ".yaml", ".yml", ".md", ".sh", ".toml"}


def _files() -> list[str]:
    if not (ROOT / ".git").exists():  # an exported tree (git archive): every file is the tree
        skip = {".venv", "results", "dashboards", "__pycache__", ".pytest_cache"}
        return [
            p.relative_to(ROOT).as_posix()
            for p in ROOT.rglob("*")
            if p.suffix in SUFFIXES and p.is_file() and not skip & set(p.relative_to(ROOT).parts)
        ]
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [f for f in listed if Path(f).suffix in SUFFIXES and (ROOT / f).is_file()]


def test_no_file_cites_a_document_outside_the_repository():
    found = [
        f"{f}:{n}"
        for f in _files()
        if f not in PENDING and not f.startswith("docs/")
        for n, line in enumerate((ROOT / f).read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert found == []


def test_every_cited_page_and_section_exists():
    missing = []
    for f in _files():
        for n, line in enumerate((ROOT / f).read_text(errors="replace").splitlines(), 1):
            for page, section in CITED.findall(line):
                path = DOCS / f"{page}.md"
                if not path.is_file():
                    missing.append(f"{f}:{n}: docs/{page}.md")
                elif section and f"§{section}" not in path.read_text():
                    missing.append(f"{f}:{n}: docs/{page}.md §{section}")
    assert missing == []


def test_the_pending_files_still_need_it():
    """A file leaves PENDING as soon as it no longer cites the old notes."""
    stale = [f for f in sorted(PENDING) if not OUTSIDE.search((ROOT / f).read_text())]
    assert stale == []
