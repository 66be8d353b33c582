"""EvalScope's file formats are known in `harness/client/` only: no other module of `harness/`
spells one of its column names, percentile labels or file names (the adapter turns them into a
`harness.measurement.Measurement`; docs/architecture.md, "The point pipeline"). The names are
the adapter's own (`harness.client.evalscope.EVALSCOPE_NAMES`)."""

from __future__ import annotations

import ast
from pathlib import Path

from harness.client.evalscope import EVALSCOPE_NAMES, PERCENTILE_FILE, RESULTS_DB, SUMMARY_FILE

HARNESS = Path(__file__).resolve().parents[2] / "harness"
CLIENT = HARNESS / "client"
FILES = (SUMMARY_FILE, PERCENTILE_FILE, RESULTS_DB)
# Figure axis titles that happen to spell a column name: the figures read the project's own
# per-request table (ttft_s), never EvalScope's files. Each entry is the exact text allowed.
AXIS_TITLES = {
    ("harness/report/per_turn.py", "TTFT (ms)"),
    ("harness/report/think_time.py", "TTFT (ms)"),
}


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring constants (prose may name EvalScope's files)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def evalscope_names_in(path: Path, relative: str) -> list[str]:
    """`relative:line: name` for every string in ``path`` that is one of EvalScope's names, or
    (outside docstrings) contains one of its file names."""
    tree = ast.parse(path.read_text(), filename=str(path))
    prose = _docstrings(tree)
    hits = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        text = node.value
        named = [text] if text in EVALSCOPE_NAMES else []
        if id(node) not in prose:
            named += [f for f in FILES if f in text and f != text]
        hits += [
            f"{relative}:{node.lineno}: {n}" for n in named if (relative, n) not in AXIS_TITLES
        ]
    return hits


def test_no_evalscope_name_outside_the_client_package():
    found = [
        hit
        for path in sorted(HARNESS.rglob("*.py"))
        if not path.is_relative_to(CLIENT)
        for hit in evalscope_names_in(path, path.relative_to(HARNESS.parent).as_posix())
    ]
    assert found == []


def test_the_check_sees_keys_arguments_paths_and_fstrings(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Reads benchmark_summary.json: prose is allowed."""\n'
        'ROW = {"Percentiles": "99%", "TTFT (ms)": 1.0}\n'
        'x = value(rows, "99%", "TPOT (ms)")\n'
        'db = folder / "benchmark_data.db"\n'
        'msg = f"{folder}/benchmark_percentile.json missing"\n'
        'title = "median TTFT (ms)"\n'
    )
    hits = [h.split(": ", 1)[1] for h in evalscope_names_in(sample, "sample.py")]
    assert sorted(hits) == sorted(
        [
            "Percentiles",
            "99%",
            "TTFT (ms)",
            "99%",
            "TPOT (ms)",
            "benchmark_data.db",
            "benchmark_percentile.json",
        ]
    )


def test_the_names_cover_both_summary_spellings_and_the_percentile_table():
    assert {"Test Duration (s)", "Time taken for tests (s)", "Avg TPOT (ms)", "TPOT (ms)"} <= (
        EVALSCOPE_NAMES
    )
    assert {"Percentiles", "99%", "Latency (s)", "benchmark_data.db"} <= EVALSCOPE_NAMES
