"""The run configuration (harness/run/config.py, docs/workloads.md §2): resolved once, stored
whole in the manifest, validated strictly when read, what --resume takes its settings from, and
derived for manifests older than it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.manifests import minimal_manifest

from harness import env as harness_env
from harness.engine_spec import EngineSpec
from harness.errors import RunError
from harness.results import read_manifest
from harness.run.config import RunConfig, build_run_config, run_config
from harness.run.request import SweepRequest, resolve
from harness.serve.profiles import load_profile
from harness.serve.workloads import load_workload_spec, workload_digest


def _edit_manifest(run: Path, edit) -> None:
    path = run / "manifest.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def test_a_resolved_config_rebuilds_its_profile():
    for profile, extra in [
        ("cpu-tiny", {}),
        ("hisparse384", {"engine": "sim", "time_scale": 4.0}),
        ("cpu-tiny", {"url": "http://127.0.0.1:9", "only_points": ["c4"]}),
    ]:
        request = SweepRequest(profile, overrides=["sweep.point_timeout_s=60"], **extra)
        target = resolve(request)
        config = target.config
        assert config is not None
        assert config.profile() == target.profile
        again = RunConfig.model_validate(json.loads(config.model_dump_json()))
        assert again == config
    assert config.client.only_points == ["c4"] and config.engine.kind == "url"


def test_the_blog_arms_record_their_workload_by_name_and_content():
    hisparse = resolve(SweepRequest("hisparse384", engine="sim")).config
    offload = resolve(SweepRequest("offload512", engine="sim")).config
    assert hisparse is not None and offload is not None
    blog = load_workload_spec("blog-openhands-13turn")
    assert hisparse.workload.name == offload.workload.name == "blog-openhands-13turn"
    assert hisparse.workload.digest == offload.workload.digest == workload_digest(blog)
    assert hisparse.server.profile["serve"] != offload.server.profile["serve"]
    shorter = resolve(SweepRequest("offload512", engine="sim", overrides=["sweep.max_tokens=64"]))
    assert shorter.config is not None and shorter.config.workload.digest != offload.workload.digest


def test_a_run_stores_it_resume_reads_it_and_older_runs_derive_it(partial_run: Path):
    """One real (cut) run, for the whole lifecycle: a sweep over the fake server takes ~8 s."""
    manifest = read_manifest(partial_run)
    assert manifest.run_config is not None
    stored = RunConfig.model_validate(manifest.run_config)
    assert stored.workload.name == "cpu-tiny"
    assert stored.environment == harness_env.snapshot()  # what was set when it started
    assert stored.profile().model_dump(mode="json") == manifest.profile
    target = resolve(SweepRequest(resume=partial_run))
    assert target.config == stored and target.profile == stored.profile()

    # an older manifest (no run_config) has it derived from its other fields, unwritten
    _edit_manifest(partial_run, lambda d: d.pop("run_config"))
    older = read_manifest(partial_run)
    assert older.run_config is None
    derived = run_config(older)
    assert derived.environment == {}  # an older run recorded none
    assert derived.model_copy(update={"environment": stored.environment}) == stored
    assert resolve(SweepRequest(resume=partial_run)).config == derived
    assert "run_config" not in json.loads((partial_run / "manifest.json").read_text())

    # the stored configuration is what a resume runs with, not the manifest's other fields
    def shorter(data: dict) -> None:
        data["run_config"] = json.loads(json.dumps(manifest.run_config))
        data["run_config"]["workload"]["fields"]["max_tokens"] = 5

    _edit_manifest(partial_run, shorter)
    assert resolve(SweepRequest(resume=partial_run)).profile.sweep.max_tokens == 5

    # validated strictly: a key it does not know names the file and the key
    _edit_manifest(partial_run, lambda d: d["run_config"]["client"].update(shards=2))
    with pytest.raises(RunError, match=r"manifest.json: key 'run_config.client.shards': unknown"):
        resolve(SweepRequest(resume=partial_run))


def test_building_from_a_profile_splits_workload_and_client():
    profile = load_profile("cpu-tiny")
    config = build_run_config(engine=EngineSpec(kind="vllm"), profile=profile, overrides=[])
    assert set(config.workload.fields) == {
        "points",
        "dataset_offset",
        "max_tokens",
        "ignore_eos",
        "multi_turn",
        "max_turns",
        "extra_args",
        "think_time",
        "slo",
    }
    assert config.client.dataset == config.client.dataset_spec == "cpu-tiny"
    assert config.client.scrape_interval_s == 0.25
    assert "sweep" not in config.server.profile
    assert config.coherence.check == profile.model_dump(mode="json")["coherence"]


def test_a_run_1_manifest_reads_its_workload_key_as_the_configuration_key(tmp_path: Path):
    data = minimal_manifest(configuration_key="0123456789abcdef").model_dump(mode="json")
    data.pop("configuration_key")
    old = {**data, "schema_version": "repro.run/1", "workload_key": "0123456789abcdef"}
    text = json.dumps(old)
    (tmp_path / "manifest.json").write_text(text)
    manifest = read_manifest(tmp_path)
    assert manifest.configuration_key == "0123456789abcdef"
    assert manifest.schema_version == "repro.run/2"
    assert (tmp_path / "manifest.json").read_text() == text  # read, not rewritten
    written = manifest.model_dump(mode="json")
    assert "workload_key" not in written and written["configuration_key"] == "0123456789abcdef"

    (tmp_path / "manifest.json").write_text(json.dumps({**old, "configuration_key": "x"}))
    with pytest.raises(RunError, match="key 'workload_key': unknown key"):  # one name, not both
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({**old, "schema_version": "repro.run/3"}))
    with pytest.raises(RunError, match="schema_version 'repro.run/3', this harness reads"):
        read_manifest(tmp_path)
