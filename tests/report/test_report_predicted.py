"""`repro report RUN --predicted SIMRUN`: the simulated run overlaid, and one table with the
static limit, the prediction and the measurement per point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.crafted_runs import write_run

from harness.cli import cli
from harness.errors import RunError
from harness.report.predicted import predicted_table, static_limit
from harness.results import load_run

CPU_SETUP = {"pool_units": 15, "block_tokens": 128, "longest_request_tokens": 1003}


def _point(parallel: int, occupancy: float, waiting: float, preemptions: float) -> dict:
    return {
        "parallel": parallel,
        "number": 2 * parallel,
        "occupancy": occupancy,
        "waiting_mean": waiting,
        "waiting_max": 2 * waiting,
        "preemptions": preemptions,
    }


def _as_sim(run_dir: Path, setup: dict, predicts: Path | None = None) -> Path:
    path = run_dir / "manifest.json"
    data = json.loads(path.read_text())
    data["engine"] = "sim"
    data["build"] = {
        "engine": "sim",
        "calibration": {"path": "/fits/base", "kind": "cpu-parity-fit"},
        "setup": setup,
        "predicts": str(predicts) if predicts else None,
    }
    path.write_text(json.dumps(data))
    return run_dir


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    real = write_run(tmp_path / "real", "real", [_point(4, 2.0, 0.5, 1), _point(8, 1.6, 3.0, 2)])
    sim = write_run(tmp_path / "sim", "sim-real", [_point(4, 2.2, 0.75, 0), _point(8, 1.2, 3.0, 2)])
    return real, _as_sim(sim, {**CPU_SETUP, "max_num_seqs": 128}, real)


def test_table_has_limit_prediction_measurement_and_error_per_point(pair):
    real, sim = pair
    table = predicted_table(load_run(real), load_run(sim))
    assert [r["label"] for r in table["rows"]] == ["c4", "c8"]
    # 15 blocks // ceil(1003 / 128) = 15 // 8 = 1, whatever the point.
    assert {r["limit"] for r in table["rows"]} == {"1"}
    assert "15 blocks // ceil(1003 tokens / 128)" in table["limit_how"]
    occ = [r["cells"][table["columns"].index("occupancy")] for r in table["rows"]]
    # c4: 2.2 / 2.0 - 1 = +10 %; c8: 1.2 / 1.6 - 1 = -25 %.
    assert occ == [
        {"predicted": "2.20", "measured": "2.00", "error": "+10%"},
        {"predicted": "1.20", "measured": "1.60", "error": "-25%"},
    ]
    pre = table["rows"][0]["cells"][table["columns"].index("preemptions")]
    assert pre == {"predicted": "0", "measured": "1", "error": "-100%"}


def test_static_limit_of_a_gpu_simulation_is_its_policys_calculator_limit(tmp_path):
    sim = write_run(tmp_path / "g", "sim-g", [_point(8, 7.0, 0.0, 0)])
    _as_sim(sim, {"policy": "hisparse", "hisparse_limit_at_80k": 57, "baseline_limit_at_80k": 8})
    assert static_limit(load_run(sim)) == (57, "capacity model hisparse limit at 80k")
    _as_sim(sim, {"policy": "offload", "hisparse_limit_at_80k": 57, "baseline_limit_at_80k": 8})
    assert static_limit(load_run(sim))[0] == 8
    _as_sim(sim, {})
    assert static_limit(load_run(sim))[0] is None


def test_report_cli_overlays_the_simulation_and_writes_the_table(pair, tmp_path):
    real, sim = pair
    out = tmp_path / "page.html"
    result = CliRunner().invoke(
        cli, ["report", str(real), "--predicted", str(sim), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    html = out.read_text(encoding="utf-8")
    assert 'id="predicted"' in html and "sim-real (simulated) predicts real" in html
    assert "+10%" in html and "-25%" in html
    assert "· simulated" in html  # the simulated series is on the figures, labelled


def test_report_without_predicted_has_no_prediction_section(pair, tmp_path):
    real, _ = pair
    out = tmp_path / "plain.html"
    result = CliRunner().invoke(cli, ["report", str(real), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert 'id="predicted"' not in out.read_text(encoding="utf-8")


def test_predicted_must_be_a_simulation_of_a_real_run_with_common_points(pair, tmp_path):
    real, sim = pair
    with pytest.raises(RunError, match="not a simulated run"):
        predicted_table(load_run(real), load_run(real))
    with pytest.raises(RunError, match="real"):
        predicted_table(load_run(sim), load_run(sim))
    other = write_run(tmp_path / "o", "sim-o", [_point(16, 1.0, 1.0, 0)])
    _as_sim(other, CPU_SETUP)
    with pytest.raises(RunError, match="no point in common"):
        predicted_table(load_run(real), load_run(other))


def test_preemptions_are_the_seeded_replays_mean_with_their_central_80_percent(pair):
    real, sim = pair
    point_json = next(sim.glob("points/p004*/point.json"))
    data = json.loads(point_json.read_text())
    data["fidelity"] = {
        "ensemble": {"seeds": 4, "preemptions": [0, 1, 1, 0], "preemptions_mean": 0.5},
        "interval80": {"preemptions": [0, 1]},
    }
    point_json.write_text(json.dumps(data))
    table = predicted_table(load_run(real), load_run(sim))
    pre = table["rows"][0]["cells"][table["columns"].index("preemptions")]
    # the replay at the mean times counted 0; the replays' mean is 0.5, measured 1
    assert pre == {"predicted": "0.5 (0–1)", "measured": "1", "error": "-50%"}
    assert "preemptions: 1 of 1 measured inside the 80 % interval" in " ".join(table["coverage"])
