"""vLLM's metric names are spelled in one module (`harness.metric_names`): the simulator that
produces them, the scraper and every reader take them from there, so no string in `harness/`
(code, docstring or f-string) names a `vllm:` metric anywhere else."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from harness import metric_names as mn

HARNESS = Path(__file__).resolve().parents[1] / "harness"
TABLE = HARNESS / "metric_names.py"
METRIC = re.compile(r"vllm:[a-z_][a-z0-9_]+")
# Prose naming a metric family inside text another change owns and writes into a generated,
# committed file (the calibration's provenance, launch/calibrations/): it moves to the table's
# name when that file is next regenerated. Each entry is the exact text still allowed.
PENDING = {("harness/sim/calibrate.py", "vllm:spec_decode")}


def _literals(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def test_no_vllm_metric_literal_outside_the_table():
    found = [
        f"{path.relative_to(HARNESS.parent)}:{line}: {METRIC.search(text).group(0)}"
        for path in sorted(HARNESS.rglob("*.py"))
        if path != TABLE
        for line, text in _literals(path)
        if METRIC.search(text)
        and (path.relative_to(HARNESS.parent).as_posix(), METRIC.search(text).group(0))
        not in PENDING
    ]
    assert found == []


def test_the_check_sees_literals_in_code_docstrings_and_fstrings(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Reads vllm:num_requests_running."""\n'
        'X = "vllm:kv_cache_usage_perc"\n'
        'Y = f"{X} and vllm:num_preemptions_total"\n'
    )
    hits = [METRIC.search(text).group(0) for _, text in _literals(sample) if METRIC.search(text)]
    assert hits == [
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total",
    ]


def test_table_names_are_unique_vllm_families():
    names = [v for k, v in vars(mn).items() if k.isupper() and k != "PREFIX"]
    assert len(names) == len(set(names))
    assert all(n.startswith(mn.PREFIX) and not n.endswith(("_total", "_sum")) for n in names)
    assert mn.total(mn.NUM_PREEMPTIONS) == "vllm:num_preemptions_total"
    assert mn.hist_sum(mn.TIME_TO_FIRST_TOKEN_SECONDS) == "vllm:time_to_first_token_seconds_sum"
