"""Environment variables are read in harness/env.py only, every one is in its table, and a run
records what was set (docs/workloads.md §4).

Reads and writes are told apart on the syntax tree: assigning or deleting an item of
``os.environ``, and a ``pop``/``setdefault``/``update``/``clear`` call whose result is unused,
are writes (allowed anywhere); any other use of ``os.environ``/``os.getenv`` is a read. A child
process's environment is ``harness.env.for_child``, since copying ``os.environ`` reads it all.
``harness/data/`` is exempt: it holds scripts other interpreters run, which cannot import the
harness."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import TypeGuard

import pytest

from harness import env

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT / "harness"
WRITE_METHODS = {"pop", "setdefault", "update", "clear"}


def _is_os_attr(node: ast.AST, names: set[str]) -> TypeGuard[ast.Attribute]:
    return (
        isinstance(node, ast.Attribute)
        and node.attr in names
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
    )


def environment_reads(source: str) -> list[int]:
    """Line numbers where ``source`` reads the process environment."""
    tree = ast.parse(source)
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            if any(alias.name in ("environ", "environb", "getenv") for alias in node.names):
                lines.append(node.lineno)
            continue
        if _is_os_attr(node, {"getenv", "getenvb"}):
            lines.append(node.lineno)
            continue
        if not _is_os_attr(node, {"environ", "environb"}):
            continue
        parent = parents.get(node)
        if isinstance(parent, ast.Subscript) and isinstance(parent.ctx, ast.Store | ast.Del):
            continue  # os.environ[k] = v / del os.environ[k]
        if isinstance(parent, ast.Attribute) and parent.attr in WRITE_METHODS:
            call = parents.get(parent)
            if isinstance(call, ast.Call) and isinstance(parents.get(call), ast.Expr):
                continue  # os.environ.pop(k, None) as a statement: its value is unused
        lines.append(node.lineno)
    return sorted(lines)


def test_the_detector_tells_reads_from_writes():
    reads = """
import os
a = os.environ.get("X")
b = os.getenv("X")
c = dict(os.environ)
d = {**os.environ}
e = os.environ["X"]
f = "X" in os.environ
g = os.environ.pop("X", None)
"""
    writes = """
import os
os.environ["X"] = "1"
del os.environ["X"]
os.environ.pop("X", None)
os.environ.setdefault("X", "1")
os.environ.update({"X": "1"})
"""
    assert environment_reads(reads) == [3, 4, 5, 6, 7, 8, 9]
    assert environment_reads(writes) == []
    assert environment_reads("from os import environ\n") == [1]


def test_no_environment_read_outside_env_module():
    found = []
    for path in sorted(HARNESS.rglob("*.py")):
        relative = path.relative_to(ROOT)
        if path == HARNESS / "env.py" or relative.parts[1] == "data":
            continue
        found += [f"{relative}:{line}" for line in environment_reads(path.read_text())]
    assert not found, "read the environment through harness.env: " + ", ".join(found)


def test_every_name_read_through_env_is_in_the_table():
    """Every literal name passed to harness.env (and to click's envvar=) is a row; a name not
    in the table is refused when read."""
    names = set()
    for path in sorted(HARNESS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.keyword)
                and node.arg == "envvar"
                and isinstance(node.value, ast.Constant)
            ):
                names.add(node.value.value)
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "harness_env"
                and node.func.attr in ("text", "path", "flag", "is_off", "integer")
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                names.add(node.args[0].value)
    assert {"REPRO_CACHE", "REPRO_HISTORY", "HF_HUB_OFFLINE", "SLURM_JOB_ID"} <= names
    for name in names:
        env.variable(name)  # KeyError when missing
    with pytest.raises(KeyError, match="NOT_A_REPRO_VARIABLE"):
        env.text("NOT_A_REPRO_VARIABLE")


def test_typed_reads(monkeypatch):
    monkeypatch.setenv("REPRO_PAD_CACHE", "Off")
    assert env.is_off("REPRO_PAD_CACHE") and not env.flag("REPRO_PAD_CACHE", True)
    monkeypatch.setenv("REPRO_PAD_CACHE", "maybe")
    assert not env.is_off("REPRO_PAD_CACHE") and env.flag("REPRO_PAD_CACHE", True)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    assert env.integer("SLURM_RESTART_COUNT", 0) == 2
    monkeypatch.setenv("SLURM_RESTART_COUNT", "two")
    with pytest.raises(Exception, match="SLURM_RESTART_COUNT='two': expected a whole number"):
        env.integer("SLURM_RESTART_COUNT", 0)
    monkeypatch.delenv("SLURM_RESTART_COUNT")
    assert env.integer("SLURM_RESTART_COUNT", 0) == 0
    monkeypatch.setenv("REPRO_PYTHON_3_11", "/opt/py311/bin/python")  # a family row
    assert env.text("REPRO_PYTHON_3_11") == "/opt/py311/bin/python"
    monkeypatch.setenv("HF_HOME", "/hf")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    assert env.hf_hub_cache() == Path("/hf/hub")


def test_snapshot_records_the_table_and_hides_secrets(monkeypatch):
    monkeypatch.setenv("REPRO_CACHE", "/tmp/cache")
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    monkeypatch.setenv("REPRO_PREBUILT_WHEEL_BLOG", "/w.whl")
    monkeypatch.setenv("SOMETHING_ELSE", "x")
    monkeypatch.setenv("HF_HUB_CACHE", "")  # empty is unset
    seen = env.snapshot()
    assert seen["REPRO_CACHE"] == "/tmp/cache"
    assert seen["HF_TOKEN"] == "<set>"
    assert seen["REPRO_PREBUILT_WHEEL_BLOG"] == "/w.whl"
    assert "SOMETHING_ELSE" not in seen and "HF_HUB_CACHE" not in seen


def test_child_environment_adds_to_this_one(monkeypatch):
    monkeypatch.setenv("REPRO_CACHE", "/c")
    child = env.for_child({"HF_HUB_OFFLINE": "1"})
    assert child["REPRO_CACHE"] == "/c" and child["HF_HUB_OFFLINE"] == "1"


def test_the_docs_hold_the_table():
    assert env.table_markdown() in (ROOT / "docs" / "workloads.md").read_text()
