"""The declared order of the stage packages, checked with import-linter: a package imports only
packages below it (function-level imports included). The order is the `layers` contract in
pyproject.toml ([tool.importlinter]); this module reads it from there, so a plain `lint-imports`
at the repository root checks the same contract. Packages on one line separated by `|` are
independent; no two packages may import each other (the contract would allow it for a `:` line,
so the last test refuses any such pair)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from itertools import combinations
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]


def _contract() -> dict:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = [
        c for c in config["tool"]["importlinter"]["contracts"] if c.get("type") == "layers"
    ]
    return contract


def _packages() -> list[str]:
    return [
        name.strip() for line in _contract()["layers"] for name in line.replace(":", "|").split("|")
    ]


def test_every_stage_package_is_in_the_declared_order():
    on_disk = {
        p.stem if p.suffix == ".py" else p.name
        for p in (ROOT / "harness").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    }
    declared = set(_packages())
    # harness/data holds data files and tooling, no package
    assert on_disk - {"data"} == declared, (
        f"not declared: {sorted(on_disk - {'data'} - declared)}, declared but gone: "
        f"{sorted(declared - on_disk)}; the order is [tool.importlinter] layers in pyproject.toml"
    )


def test_import_linter_layers_contract_from_pyproject():
    contract = _contract()
    assert contract["containers"] == ["harness"] and contract.get("exhaustive") is True
    result = subprocess.run(
        [Path(sys.executable).parent / "lint-imports", "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "1 kept, 0 broken" in result.stdout, result.stdout[-2000:]


def test_no_two_packages_import_each_other():
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
    assert two_way == set()
