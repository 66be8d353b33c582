"""An offline simulated run records its run configuration and environment as a sweep does
(docs/workloads.md §2), so report, regress and export read it through one typed record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.report.tables import provenance
from harness.results import load_run
from harness.run.config import RunConfig, configured_objectives, configured_sweep, run_config
from harness.serve.profiles import load_profile
from harness.sim.run import run_simulation
from harness.sim.startup import EngineRefused

SETS = ["sweep.points=[[1,2],[2,4]]", "sweep.scrape_interval_s=2", "sim.prefill_eff=0.5"]


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("simcfg")
    recipe = root / "small.yaml"
    recipe.write_text(
        "number: 6\nnum_turns: 2\nfirst_turn_length: 20000\nsubsequent_turn_length: 400\n"
    )
    with pytest.MonkeyPatch.context() as env:
        env.setenv("REPRO_PAD_CACHE", "off")
        env.setenv("HF_TOKEN", "hf_not_a_real_token")
        return run_simulation(
            "offload512",
            dataset=str(recipe),
            overrides=SETS,
            points=["c2"],
            out=root,
            run_id="cfg",
        )


def test_the_manifest_holds_the_run_configuration_of_the_simulation(simulated: Path) -> None:
    manifest = load_run(simulated).manifest
    stored = json.loads((simulated / "manifest.json").read_text())["run_config"]
    config = run_config(manifest)
    assert config == RunConfig.model_validate(stored)
    assert (config.engine.kind, config.engine.simulated) == ("sim", True)
    assert config.server.profile_name == "offload512"
    assert config.server.overrides == SETS  # as given, the simulator's own sim.* included
    assert config.client.only_points == ["c2"]
    assert config.client.dataset_spec == manifest.dataset["spec"]
    # what the client sent is the resolved sweep's (after --set sweep.*)
    assert config.workload.fields["points"] == [[1, 2], [2, 4]]
    assert config.profile().sweep.model_dump(mode="json") == manifest.sweep
    assert config.profile() == load_profile("offload512", SETS[:2]).model_copy(
        update={"source": config.profile().source}
    )


def test_the_environment_is_recorded_a_secret_by_presence_only(simulated: Path) -> None:
    environment = run_config(load_run(simulated).manifest).environment
    assert environment["REPRO_PAD_CACHE"] == "off"
    assert environment["HF_TOKEN"] == "<set>"


def test_an_older_simulated_manifest_derives_the_same_configuration(simulated: Path) -> None:
    """A run written before `repro simulate` recorded the field reads as the same record, but
    for what an older manifest never held (the environment, --points)."""
    manifest = load_run(simulated).manifest
    recorded = run_config(manifest)
    derived = run_config(manifest.model_copy(update={"run_config": None}))
    assert derived == recorded.model_copy(
        update={
            "environment": {},
            "client": recorded.client.model_copy(update={"only_points": None}),
        }
    )


def test_the_run_table_and_objectives_read_as_from_the_manifest(simulated: Path) -> None:
    """Reading the configuration changes nothing a report shows for a new run: the sweep row
    is the manifest's sweep, field for field and in order."""
    run = load_run(simulated)
    row = next(value for name, value, _ in provenance(run) if name == "sweep")
    assert row == json.dumps(run.manifest.sweep, indent=2, sort_keys=True, default=str)
    assert list(configured_sweep(run).items()) == list(run.manifest.sweep.items())
    assert configured_objectives(run) == run.manifest.sweep["slo"]


def test_a_refused_simulation_records_its_configuration_too(tmp_path: Path) -> None:
    """A start the engine refuses is a failed run that claims judge: it carries the record."""
    recipe = tmp_path / "one-m.yaml"
    recipe.write_text(
        "number: 3\nnum_turns: 2\nfirst_turn_length: 1000000\nsubsequent_turn_length: 500\n"
    )
    sets = ["sweep.points=[[1,1]]"]
    with pytest.raises(EngineRefused):
        run_simulation("offload512-1m", dataset=str(recipe), overrides=sets, out=tmp_path)
    [run_dir] = [p for p in tmp_path.iterdir() if p.is_dir()]
    run = load_run(run_dir)
    assert run.manifest.status == "failed" and run.manifest.run_config is not None
    config = run_config(run.manifest)
    assert (config.engine.kind, config.server.profile_name, config.server.overrides) == (
        "sim",
        "offload512-1m",
        sets,
    )
