"""Calibrated by default (issue 24, item 5): `repro simulate` picks the calibration fitted for
the profile's model and GPU; a run with none (`--calibration none`, or no file matching) says
"uncalibrated" in its summary, its report and its figures' labels, and carries no interval."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import cli
from harness.report.dashboard import render_report
from harness.report.figures import pareto_figure, traces_by_role
from harness.report.series import run_series
from harness.results import load_run
from harness.sim import config as sim_config

SETS = ["--set", "sweep.points=[[1,2]]", "--set", "sweep.scrape_interval_s=2"]
BANDED = {"occupancy", "interactivity", "throughput_per_gpu"}


@pytest.fixture
def recipe(tmp_path: Path) -> Path:
    path = tmp_path / "short.yaml"
    path.write_text(
        "number: 4\nnum_turns: 2\nfirst_turn_length: 3000\nsubsequent_turn_length: 200\n"
    )
    return path


def _simulate(tmp_path: Path, recipe: Path, *args: str) -> tuple[str, Path]:
    command = ["simulate", "--profile", "hisparse384", "--dataset", str(recipe), *SETS]
    command += ["--out", str(tmp_path / "runs"), "--run-id", "r", *args]
    result = CliRunner().invoke(cli, command)
    assert result.exit_code == 0, result.output
    return result.output, tmp_path / "runs" / "r"


def _summary(run_dir: Path) -> tuple[dict, list[dict[str, str]]]:
    with (run_dir / "summary.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    return json.loads((run_dir / "summary.json").read_text()), rows


def test_the_calibration_of_the_profiles_model_and_gpu_is_picked(tmp_path, recipe):
    output, run_dir = _simulate(tmp_path, recipe)
    found = sim_config.find_calibration("glm-5.3", "h200")
    assert found is not None and found.name == "glm53-h200.yaml"
    assert "calibration: calibrated (glm53-h200.yaml)" in output
    run = load_run(run_dir)
    assert run.manifest.build["calibration"]["path"] == str(found)
    assert run.manifest.calibration == "glm53-h200"
    assert run.points and all(set(p.fidelity["interval80"]) == BANDED for p in run.points)
    summary, rows = _summary(run_dir)
    assert summary["calibration"] == "glm53-h200" and rows[0]["calibration"] == "glm53-h200"
    (series,) = run_series([run])
    assert series.name == "r (hisparse384) · simulated (glm53-h200)"


@pytest.mark.parametrize("how", ["calibration-none", "no-matching-file"])
def test_an_uncalibrated_run_says_so_everywhere(tmp_path, recipe, monkeypatch, how):
    args: list[str] = []
    if how == "calibration-none":
        args = ["--calibration", "none"]
    else:  # a calibrations folder without a file for GLM-5.3 on H200
        empty = tmp_path / "calibrations"
        empty.mkdir()
        find = sim_config.find_calibration
        monkeypatch.setattr(sim_config, "find_calibration", lambda m, g: find(m, g, empty))
    output, run_dir = _simulate(tmp_path, recipe, *args)
    assert "calibration: uncalibrated (roofline defaults)" in output
    run = load_run(run_dir)
    assert run.manifest.build["calibration"]["path"] is None
    assert run.manifest.calibration == "uncalibrated"
    assert run.points and all("interval80" not in p.fidelity for p in run.points)
    summary, rows = _summary(run_dir)
    assert summary["calibration"] == "uncalibrated" and rows[0]["calibration"] == "uncalibrated"
    (series,) = run_series([run])
    assert series.name == "r (hisparse384) · simulated, uncalibrated"
    fig = pareto_figure([run], published=False)
    assert traces_by_role(fig, "points")[0].name == series.name
    assert traces_by_role(fig, "band") == [] and traces_by_role(fig, "occupancy-band") == []
    assert "simulated, uncalibrated (roofline defaults)," in render_report([run])


def test_a_parameter_moved_off_the_fit_is_named_and_voids_the_interval(tmp_path, recipe):
    output, run_dir = _simulate(tmp_path, recipe, "--set", "sim.hbm_eff=0.7")
    assert "calibration: calibrated (glm53-h200.yaml) + sim.hbm_eff=0.7" in output
    run = load_run(run_dir)
    assert run.manifest.build["calibration"]["modified"] == {"hbm_eff": 0.7}
    assert run.manifest.build["params"]["hbm_eff"] == 0.7
    assert run.manifest.calibration == "glm53-h200 + sim.hbm_eff=0.7"
    # The interval was the fit's: none is written, none is drawn.
    assert run.points and all("interval80" not in p.fidelity for p in run.points)
    summary, rows = _summary(run_dir)
    assert summary["calibration"] == rows[0]["calibration"] == "glm53-h200 + sim.hbm_eff=0.7"
    (series,) = run_series([run])
    assert series.name == "r (hisparse384) · simulated (glm53-h200 + sim.hbm_eff=0.7)"
    fig = pareto_figure([run], published=False)
    assert traces_by_role(fig, "band") == [] and traces_by_role(fig, "occupancy-band") == []
