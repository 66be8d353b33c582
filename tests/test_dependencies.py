"""The package declares what it imports: every third-party module `harness/` imports comes from a
distribution listed in pyproject.toml (`dependencies`, or the optional extra that names the
feature), and every declared dependency is imported somewhere or listed below with why not."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT / "harness"
# Run by another interpreter (a vLLM build's venv), never imported by the harness itself.
BUILD_VENV_SCRIPTS = {
    "harness/serve/tiny/build_model_script.py",
    "harness/serve/vllm_probe.py",
    "harness/data/vllm_serve_options/generate.py",
    "harness/data/vllm_side/repro_sched_trace.py",  # inside the server: --scheduler-cls
}
# Declared though no module imports them: what they are for.
NOT_IMPORTED = {
    "evalscope": "the client, run as the `evalscope perf` executable (one process per point)",
}


def _requirement_name(spec: str) -> str:
    return re.split(r"[\s\[<>=!~;]", spec, maxsplit=1)[0].lower().replace("_", "-")


def _declared() -> tuple[set[str], dict[str, set[str]]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = {
        name: {_requirement_name(s) for s in specs}
        for name, specs in project.get("optional-dependencies", {}).items()
    }
    return {_requirement_name(s) for s in project["dependencies"]}, extras


def _imported_distributions() -> dict[str, set[str]]:
    """distribution -> the harness modules importing it (outside the build-venv scripts)."""
    dists = packages_distributions()
    out: dict[str, set[str]] = {}
    for path in sorted(HARNESS.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in BUILD_VENV_SCRIPTS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top == "harness" or top in sys.stdlib_module_names:
                    continue
                for dist in dists.get(top, [top]):
                    out.setdefault(dist.lower().replace("_", "-"), set()).add(rel)
    return out


def test_every_imported_distribution_is_declared():
    required, extras = _declared()
    declared = required | set().union(*extras.values())
    missing = {d: sorted(m) for d, m in _imported_distributions().items() if d not in declared}
    assert missing == {}


def test_every_declared_dependency_is_imported_or_says_why_not():
    required, _ = _declared()
    imported = set(_imported_distributions())
    assert sorted(required - imported - set(NOT_IMPORTED)) == []
