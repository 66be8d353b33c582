"""`report`, `regress`, `export` and `claims` read a run's configuration through its typed
RunConfig (harness/serve/run_config.py, docs/workloads.md §2), not the manifest's dicts; an
older record too partial to derive one from still loads, with no objectives or think time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.crafted_runs import write_run

from harness.dataset.thinktime import NO_THINK_TIME
from harness.engine_spec import EngineSpec
from harness.errors import RunError
from harness.gate.policy import DEFAULT_CPU_POLICY, DEFAULT_GPU_POLICY, choose_regression_policy
from harness.report.tables import provenance, slo_rows
from harness.report.think_time import run_think_time
from harness.results import load_run
from harness.run.config import build_run_config, configured_gpus, readable_config
from harness.serve.profiles import load_profile

POINTS = [{"parallel": 1, "number": 4, "throughput_per_gpu": 10.0}]
SETS = ["sweep.slo=tpot=50ms", "sweep.think_time={kind: fixed, seconds: 3}", "gpus=0"]


def _with_config(run_dir: Path, config: dict) -> None:
    manifest = run_dir / "manifest.json"
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**data, "run_config": config}))


@pytest.fixture
def configured(tmp_path: Path) -> Path:
    """A run whose manifest `sweep` names no objectives: only its RunConfig does."""
    run_dir = write_run(tmp_path / "a", "a", POINTS)
    profile = load_profile("cpu-tiny", SETS)
    config = build_run_config(engine=EngineSpec(kind="vllm"), profile=profile, overrides=SETS)
    _with_config(run_dir, config.model_dump(mode="json"))
    return run_dir


def test_the_objectives_think_time_and_gpus_come_from_the_run_configuration(configured: Path):
    run = load_run(configured)
    assert "slo" not in run.manifest.sweep and run.manifest.profile["gpus"] == 8
    [row] = slo_rows([run])
    assert (row["objectives"], row["source"]) == ("tpot=50ms", "sweep.slo")
    assert (run_think_time(run).kind, run_think_time(run).seconds) == ("fixed", 3.0)
    assert configured_gpus(run) == 0  # the configured CPU profile, not the divisor
    assert choose_regression_policy(run, None).source == DEFAULT_CPU_POLICY
    sweep = _row(run, "sweep")
    assert json.loads(sweep)["slo"] == "tpot=50ms"


def _row(run, label: str) -> str:
    return next(value for name, value, _ in provenance(run) if name == label)


def test_a_record_too_partial_to_derive_a_configuration_still_reads(tmp_path: Path):
    run = load_run(write_run(tmp_path / "old", "old", POINTS))  # hand-made: a partial profile
    assert readable_config(run.manifest) is None
    assert slo_rows([run]) == []  # no objectives, as before the configuration existed
    assert run_think_time(run) == NO_THINK_TIME
    assert configured_gpus(run) == 8
    assert choose_regression_policy(run, None).source == DEFAULT_GPU_POLICY
    assert json.loads(_row(run, "sweep")) == run.manifest.sweep


def test_a_damaged_stored_configuration_is_an_error_naming_the_key(tmp_path: Path):
    run_dir = write_run(tmp_path / "bad", "bad", POINTS)
    _with_config(run_dir, {"schema_version": "repro.runconfig/1", "engine": {"kind": "vllm"}})
    with pytest.raises(RunError, match=rf"^{run_dir / 'manifest.json'}: .*run_config"):
        slo_rows([load_run(run_dir)])
