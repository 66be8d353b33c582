"""A simulated run names its calibration in its summary (summary.json and every summary.csv
row); a real run names none; manifests that recorded neither still load (issue 24, item 5)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from support.manifests import minimal_manifest

from harness.engine_spec import EngineSpec
from harness.results import (
    SUMMARY_SCHEMA,
    UNCALIBRATED,
    PointRecord,
    RunLayout,
    atomic_write_json,
    load_run,
    write_summary,
)

CAL = "/repo/launch/calibrations/glm53-h200.yaml"
OFFLINE = {"engine": "sim", "engine_spec": EngineSpec(kind="sim", simulated=True)}
SERVED = {
    "engine": "sim",
    "engine_spec": EngineSpec(kind="sim-http", simulated=True, args={"time_scale": 2.0}),
}


def _point(parallel: int) -> PointRecord:
    return PointRecord(
        point_id=f"p{parallel:03d}-n0002-r0",
        label=f"c{parallel}",
        parallel=parallel,
        number=2,
        dataset_offset=0,
        conversations=[0, 1],
        turns=1,
        expected_requests=2,
        started_at=0.0,
        ended_at=1.0,
        window=(0.0, 1.0),
        valid=True,
        metrics={"occupancy": float(parallel)},
    )


def _write(root: Path, **fields: Any) -> tuple[dict[str, Any], list[dict[str, str]]]:
    layout = RunLayout(root)
    atomic_write_json(layout.manifest, minimal_manifest(**fields))
    write_summary(layout, "r", [_point(4), _point(1)])
    summary = json.loads(layout.summary_json.read_text())
    with layout.summary_csv.open(newline="") as handle:
        return summary, list(csv.DictReader(handle))


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({**OFFLINE, "build": {"calibration": {"path": CAL, "label": "calibrated"}}}, "glm53-h200"),
        ({**OFFLINE, "build": {"calibration": {"path": None}}}, UNCALIBRATED),
        ({**SERVED, "launch": {"sim": {"calibration": CAL}}}, "glm53-h200"),
        ({**SERVED, "launch": {"sim": {"calibration": None}}}, UNCALIBRATED),
    ],
    ids=["offline", "offline-uncalibrated", "served", "served-uncalibrated"],
)
def test_a_simulated_run_names_its_calibration_in_its_summary(
    tmp_path: Path, fields: dict[str, Any], expected: str
) -> None:
    summary, rows = _write(tmp_path, **fields)
    assert summary["schema_version"] == SUMMARY_SCHEMA == "repro.summary/2"
    assert summary["calibration"] == expected
    assert [r["calibration"] for r in summary["rows"]] == [expected, expected]
    assert [(r["label"], r["calibration"]) for r in rows] == [("c1", expected), ("c4", expected)]
    assert load_run(tmp_path).manifest.calibration == expected


def test_a_real_run_names_no_calibration(tmp_path: Path) -> None:
    # a real server's launch facts never make it "calibrated", whatever they hold
    summary, rows = _write(tmp_path, engine="vllm", launch={"sim": {"calibration": CAL}})
    assert summary["calibration"] is None
    assert all("calibration" not in row for row in summary["rows"])
    assert "calibration" not in rows[0]


def test_a_simulated_run_that_recorded_no_calibration_loads_without_one(tmp_path: Path) -> None:
    # a served simulation whose server never reported its facts (older runs, a failed start)
    summary, _ = _write(tmp_path, **SERVED, launch={"engine": "sim"})
    assert summary["calibration"] is None
    assert load_run(tmp_path).manifest.calibration is None


def test_a_summary_without_a_manifest_has_no_calibration(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path)
    summary = write_summary(layout, "r", [_point(1)])
    assert summary.calibration is None and "calibration" not in summary.rows[0]
