"""`repro report RUN --predicted SIMRUN`: a calibrated prediction shows its 80 % interval beside
each predicted value, and the table says how many measurements fall inside it (coverage) and
how wide the intervals are, per metric (issue 24, item 4)."""

from __future__ import annotations

import json
from pathlib import Path

from support.crafted_runs import write_run

from harness.report.dashboard import render_report
from harness.report.predicted import predicted_table
from harness.results import load_run


def _point(parallel: int, occupancy: float, interactivity: float) -> dict:
    return {
        "parallel": parallel,
        "number": 2 * parallel,
        "occupancy": occupancy,
        "interactivity": interactivity,
    }


def _with_intervals(run_dir: Path, intervals: dict[str, dict[str, list[float]]]) -> Path:
    manifest = run_dir / "manifest.json"
    data = json.loads(manifest.read_text())
    data["engine"] = "sim"
    data["build"] = {"engine": "sim", "calibration": {"path": "/x/glm53-h200.yaml"}}
    manifest.write_text(json.dumps(data))
    for path in sorted(run_dir.glob("points/*/point.json")):
        record = json.loads(path.read_text())
        record["fidelity"] = {"interval80": intervals[record["label"]]}
        path.write_text(json.dumps(record))
    return run_dir


def test_intervals_are_shown_and_their_coverage_counted(tmp_path: Path) -> None:
    real = write_run(tmp_path / "real", "real", [_point(4, 3.0, 50.0), _point(8, 6.0, 20.0)])
    sim = write_run(tmp_path / "sim", "sim", [_point(4, 3.2, 60.0), _point(8, 6.4, 24.0)])
    _with_intervals(
        sim,
        {
            # c4: occupancy 3.0 inside [2.8, 3.6], interactivity 50 below [54, 66]
            "c4": {"occupancy": [2.8, 3.6], "interactivity": [54.0, 66.0]},
            # c8: occupancy 6.0 inside [5.6, 7.2], interactivity 20 inside [18, 30]
            "c8": {"occupancy": [5.6, 7.2], "interactivity": [18.0, 30.0]},
        },
    )
    table = predicted_table(load_run(real), load_run(sim))
    occ = table["columns"].index("occupancy")
    assert table["rows"][0]["cells"][occ]["predicted"] == "3.20 (2.80–3.60)"
    assert table["calibration"] == "glm53-h200"
    # half-widths: occupancy 0.4/3.2 and 0.8/6.4 (12.5 %); interactivity 6/60 and 6/24
    assert table["coverage"] == [
        "occupancy: 2 of 2 measured inside the 80 % interval (median half-width 12.5 %)",
        "interactivity: 1 of 2 measured inside the 80 % interval (median half-width 17.5 %)",
    ]
    page = render_report([load_run(real)], predicted=[load_run(sim)])
    assert "interactivity: 1 of 2 measured inside the 80 % interval" in page


def test_a_prediction_without_intervals_reports_no_coverage(tmp_path: Path) -> None:
    real = write_run(tmp_path / "real", "real", [_point(4, 3.0, 50.0)])
    sim = write_run(tmp_path / "sim", "sim", [_point(4, 3.2, 60.0)])
    data = json.loads((sim / "manifest.json").read_text())
    (sim / "manifest.json").write_text(json.dumps({**data, "engine": "sim"}))
    table = predicted_table(load_run(real), load_run(sim))
    assert table["coverage"] == [] and table["rows"][0]["cells"][0]["predicted"] == "3.20"
    assert "measured inside" not in render_report([load_run(real)], predicted=[load_run(sim)])
