"""mypy over the modules whose types are checked (the fast tier runs it): the bottom records,
the engines, the run and client stages and the readers changed with them. The rest of
`harness/` is not yet clean under mypy (the count is in docs/architecture.md); a module joins
TYPED when it is. In TYPED modules every `# type: ignore` says why on the same line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TYPED = [
    "harness/errors.py",
    "harness/paths.py",
    "harness/config.py",
    "harness/identity.py",
    "harness/text.py",
    "harness/metric_names.py",
    "harness/engine_spec.py",
    "harness/env.py",
    "harness/measurement.py",
    "harness/results.py",
    "harness/client",
    "harness/engines",
    "harness/run",
    "harness/serve/profiles.py",
    "harness/serve/workloads.py",
    "harness/cluster/listing.py",
    "harness/report/series.py",
    "harness/report/predicted.py",
    "harness/sim/run.py",
]
IGNORE = re.compile(r"#\s*type:\s*ignore(\[[^\]]*\])?(?P<rest>.*)$")


def test_mypy_is_clean_over_the_typed_modules(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--ignore-missing-imports",
            "--follow-imports=silent",
            "--cache-dir",
            str(tmp_path / "cache"),
            *TYPED,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


def test_every_type_ignore_in_the_typed_modules_says_why():
    files = [
        p for t in TYPED for p in ((ROOT / t).rglob("*.py") if (ROOT / t).is_dir() else [ROOT / t])
    ]
    bare = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in files
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if (m := IGNORE.search(line)) and not m.group("rest").strip(" #-")
    ]
    assert bare == []
