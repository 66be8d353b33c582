"""`repro compare`: per point and metric deltas, ratios and better/worse by direction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.crafted_runs import write_run

from harness.analysis.compare import (
    compare_curves,
    compare_runs,
    curve_values,
    render_table,
    verdict,
)
from harness.cli import cli
from harness.results import METRICS, load_run


def _runs(tmp_path: Path):
    a = write_run(
        tmp_path / "a",
        "base",
        [
            {
                "parallel": 1,
                "number": 2,
                "interactivity": 100.0,
                "mean_ttft_ms": 200.0,
                "occupancy": 1.0,
                "kv_cache_usage_max": 0.5,
                "throughput_per_gpu": 1000.0,
            },
            {
                "parallel": 8,
                "number": 16,
                "interactivity": 20.0,
                "mean_ttft_ms": 900.0,
                "occupancy": 5.0,
                "preemptions": 0.0,
            },
            {"parallel": 16, "number": 32, "interactivity": 10.0},
        ],
    )
    b = write_run(
        tmp_path / "b",
        "cand",
        [
            {
                "parallel": 1,
                "number": 2,
                "interactivity": 110.0,
                "mean_ttft_ms": 300.0,
                "occupancy": 1.01,
                "kv_cache_usage_max": 0.9,
                "throughput_per_gpu": 500.0,
            },
            {
                "parallel": 8,
                "number": 16,
                "interactivity": 15.0,
                "mean_ttft_ms": 450.0,
                "occupancy": 7.5,
                "preemptions": 4.0,
                "valid": False,
                "invalid_reasons": ["1 request failed"],
            },
            {"parallel": 24, "number": 48, "interactivity": 8.0},
        ],
    )
    return load_run(a), load_run(b)


def _row(rows, point, metric):
    [row] = [r for r in rows if r["point"] == point and r["metric"] == metric]
    return row


def test_directions_ratios_and_verdicts(tmp_path: Path) -> None:
    rows = compare_runs(*_runs(tmp_path))
    # higher is better: +10% interactivity is better, -50% throughput worse
    row = _row(rows, "c1", "interactivity")
    assert (row["a"], row["b"], row["better"]) == (100.0, 110.0, "higher")
    assert _row(rows, "c1", "interactivity")["ratio"] == pytest.approx(1.1)
    assert _row(rows, "c1", "interactivity")["delta"] == pytest.approx(10.0)
    assert _row(rows, "c1", "interactivity")["verdict"] == "better"
    assert _row(rows, "c1", "throughput_per_gpu")["verdict"] == "worse"
    # lower is better: TTFT up 50% is worse, halved is better
    assert _row(rows, "c1", "mean_ttft_ms")["verdict"] == "worse"
    assert _row(rows, "c8", "mean_ttft_ms")["verdict"] == "better"
    assert _row(rows, "c8", "mean_ttft_ms")["ratio"] == pytest.approx(0.5)
    # within tolerance: same; no direction: info; from zero: ratio undefined, still judged
    assert _row(rows, "c1", "occupancy")["verdict"] == "same"
    assert _row(rows, "c1", "kv_cache_usage_max")["verdict"] == "info"
    preempt = _row(rows, "c8", "preemptions")
    assert preempt["ratio"] is None and preempt["delta"] == 4.0 and preempt["verdict"] == "worse"
    # validity travels with the row
    assert _row(rows, "c8", "occupancy")["b_valid"] is False
    assert _row(rows, "c8", "occupancy")["a_valid"] is True


def test_unmatched_points_are_reported_missing(tmp_path: Path) -> None:
    rows = compare_runs(*_runs(tmp_path))
    assert _row(rows, "c16", "interactivity")["verdict"] == "missing"
    assert _row(rows, "c16", "interactivity")["b"] is None
    assert _row(rows, "c24", "interactivity")["verdict"] == "missing"
    assert _row(rows, "c24", "interactivity")["a"] is None
    assert [r["point"] for r in rows if r["metric"] == "interactivity"] == [
        "c1",
        "c8",
        "c16",
        "c24",
    ]
    assert len(rows) == 4 * len(METRICS)


def test_verdict_rules() -> None:
    assert verdict("interactivity", 100.0, 101.0) == "same"
    assert verdict("interactivity", 100.0, 103.0) == "better"
    assert verdict("interactivity", 100.0, 103.0, tolerance=0.05) == "same"
    assert verdict("mean_tpot_ms", 10.0, 9.0) == "better"
    assert verdict("preemptions", 0.0, 0.0) == "same"
    assert verdict("preemptions", 0.0, 1.0) == "worse"
    assert verdict("interactivity", None, 1.0) == "n/a"
    assert verdict("duration_s", 1.0, 2.0) == "info"


def test_terminal_table_marks_direction_and_invalid(tmp_path: Path) -> None:
    a, b = _runs(tmp_path)
    text = render_table(compare_runs(a, b), a.name, b.name)
    assert "c8 (parallel 8, 16 conversations)  [B invalid]" in text
    ttft = next(
        line for line in text.splitlines() if line.startswith("Mean TTFT") and "450" in line
    )
    assert "lower" in ttft and "0.500x" in ttft and "better" in ttft
    assert "WORSE" in next(
        line for line in text.splitlines() if line.startswith("Total-token throughput")
    )
    # metrics neither run has are left out unless asked for
    assert "HiSparse host-to-device" not in text
    assert "HiSparse host-to-device" in render_table(
        compare_runs(a, b), a.name, b.name, include_empty=True
    )


def test_cli_compare_table_and_json(tmp_path: Path) -> None:
    _runs(tmp_path)
    runner = CliRunner()
    result = runner.invoke(cli, ["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert result.exit_code == 0, result.output
    assert "A = base" in result.output and "WORSE" in result.output
    result = runner.invoke(
        cli, ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json", "--tolerance", "0.2"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["a"] == "base" and data["b"] == "cand" and data["tolerance"] == 0.2
    assert _row(data["rows"], "c1", "interactivity")["verdict"] == "same"  # 10% < 20%
    assert _row(data["rows"], "c1", "throughput_per_gpu")["verdict"] == "worse"


def test_cli_compare_names_a_missing_run(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("REPRO_RESULTS", str(tmp_path))
    result = CliRunner().invoke(cli, ["compare", "nope", "nope2"])
    assert result.exit_code != 0
    assert "nope: not a run directory" in str(result.exception)


def test_whole_curve_scalars(tmp_path: Path) -> None:
    a, b = _runs(tmp_path)
    values = curve_values(a)
    # frontier of (100, 1000) alone: area 100 x 1000; c8/c16 have no throughput
    assert values["frontier_auc"] == pytest.approx(100_000.0)
    assert values["max_occupancy"] == 5.0
    assert values["frontier_auc_bench_sweep"] is None
    # B's c8 is invalid: its occupancy 7.5 must not count
    assert curve_values(b)["max_occupancy"] == pytest.approx(1.01)
    rows = {r["metric"]: r for r in compare_curves(a, b)}
    assert rows["frontier_auc"]["ratio"] == pytest.approx(110 * 500 / 100_000)
    assert rows["frontier_auc"]["verdict"] == "worse"
    assert rows["max_occupancy"]["verdict"] == "worse"
    assert rows["frontier_auc_bench_sweep"]["verdict"] == "n/a"
    result = CliRunner().invoke(
        cli, ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json"]
    )
    data = json.loads(result.output)
    assert {r["metric"] for r in data["curves"]} == set(rows)
    text = CliRunner().invoke(cli, ["compare", str(tmp_path / "a"), str(tmp_path / "b")]).output
    assert "whole curve (valid points)" in text and "Frontier AUC (blog definition)" in text
