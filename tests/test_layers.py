"""The declared order of the stage packages, checked with import-linter: a package imports only
packages below it (function-level imports included). Packages on one line separated by `|` are
independent; `serve : dataset` is the one pair that still imports both ways (the doctor's hub
check reads dataset recipes; the dataset builder uses the tiny tokenizers and profiles), so it
is declared as such and counted below rather than hidden."""

from __future__ import annotations

import subprocess
import sys
from itertools import combinations
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
# Top to bottom; see docs/architecture.md.
LAYERS = [
    "cli",
    "gate",
    "report | cluster | plan",
    "run",
    "engines | coherence",
    "sim",
    "capacity | client",
    "serve",
    "dataset",
    "analysis",
    "measurement | records",
    "results",
    "metric_names | engine_spec | identity | config | text | paths | names",
    "env",
    "errors",
]
KNOWN_TWO_WAY: set[tuple[str, str]] = set()


def _packages() -> list[str]:
    return [name.strip() for line in LAYERS for name in line.replace(":", "|").split("|")]


def test_every_stage_package_is_in_the_declared_order():
    on_disk = {
        p.stem if p.suffix == ".py" else p.name
        for p in (ROOT / "harness").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    }
    assert on_disk - {"data"} == set(_packages())  # harness/data holds data files and tooling


def test_import_linter_layers_contract(tmp_path):
    layers = "\n".join(f"    {line}" for line in LAYERS)
    config = tmp_path / "importlinter.ini"
    config.write_text(
        "[importlinter]\nroot_package = harness\n\n"
        "[importlinter:contract:layers]\nname = stage packages, top to bottom\n"
        f"type = layers\ncontainers =\n    harness\nlayers =\n{layers}\n"
    )
    result = subprocess.run(
        [Path(sys.executable).parent / "lint-imports", "--config", str(config), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


def test_two_way_package_pairs_are_only_the_declared_ones():
    graph = grimp.build_graph("harness")
    names = _packages()
    two_way = {
        (a, b)
        for a, b in combinations(sorted(names), 2)
        if graph.direct_import_exists(
            importer=f"harness.{a}", imported=f"harness.{b}", as_packages=True
        )
        and graph.direct_import_exists(
            importer=f"harness.{b}", imported=f"harness.{a}", as_packages=True
        )
    }
    assert two_way == KNOWN_TWO_WAY
