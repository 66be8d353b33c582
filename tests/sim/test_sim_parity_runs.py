"""CPU parity on run directories: what is refused (simulated runs as inputs, writing into an
existing run), and the target checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.crafted_runs import write_run

from harness.errors import RunError
from harness.sim.parity import fit_cpu_cost
from harness.sim.parity_run import ParityRow, predict_run, same_order, target_misses


def _run(root: Path, engine: str = "vllm") -> Path:
    run = write_run(root, root.name, [{"parallel": 1, "number": 2, "occupancy": 1.0}])
    path = run / "manifest.json"
    data = json.loads(path.read_text())
    data["engine"] = engine
    path.write_text(json.dumps(data))
    return run


def test_fit_refuses_a_simulated_run(tmp_path):
    with pytest.raises(RunError, match="simulated run"):
        fit_cpu_cost(_run(tmp_path / "sim-x", "sim"))


def test_prediction_never_writes_into_an_existing_run_directory(tmp_path):
    real = _run(tmp_path / "real")
    with pytest.raises(RunError, match="never writes into an existing run"):
        predict_run(real, real, tmp_path, run_id="real")  # the real run's own directory
    assert json.loads((real / "manifest.json").read_text())["engine"] == "vllm"


def test_same_order_is_a_factor_three_on_counts_plus_one():
    assert same_order(0, 1) and same_order(5.16, 5.45) and same_order(2, 8)
    assert not same_order(0, 5) and not same_order(1, 9) and not same_order(None, 1)


def _row(occ_pred: float, occ_meas: float, pre: tuple[float, float]) -> ParityRow:
    base = {"waiting_busy_mean": 2.0, "waiting_max": 4.0}
    return ParityRow(
        "p", "c8", 1,
        {**base, "occupancy": occ_meas, "preemptions": pre[1]},
        {**base, "occupancy": occ_pred, "preemptions": pre[0]},
    )  # fmt: skip


def test_targets_flag_occupancy_beyond_15_percent_and_counts_of_another_order():
    assert target_misses([_row(1.14, 1.0, (0, 1))]) == []  # +14 %: inside
    misses = target_misses([_row(1.2, 1.0, (0, 6))])
    assert len(misses) == 2
    assert misses[0].startswith("c8: occupancy") and "preemptions" in misses[1]


def test_the_verdict_compares_engine_occupancy_where_both_sides_have_it():
    row = _row(1.0, 1.0, (0, 0))
    engine = ParityRow(
        "p", "c8", 1,
        {**row.measured, "engine_occupancy": 2.0},
        {**row.predicted, "engine_occupancy": 2.5},
    )  # fmt: skip
    assert engine.occupancy_key == "engine_occupancy"
    assert engine.occupancy_error == pytest.approx(0.25)
    (miss,) = target_misses([engine])  # the gauges agree; the engine's own time does not
    assert miss == "c8: engine_occupancy 2.5 vs 2.0"
    # one side without it (a record from before the metric): the gauge's occupancy
    older = ParityRow("p", "c8", 1, row.measured, {**row.predicted, "engine_occupancy": 2.5})
    assert older.occupancy_key == "occupancy" and older.occupancy_error == 0.0
