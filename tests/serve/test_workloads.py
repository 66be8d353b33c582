"""Workload files (datasets/workloads/*.yaml): strict loading, profiles naming them, the resolved
sweep (workload, then the profile's sweep block, then --set), docs/workloads.md §1."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness.errors import ConfigError
from harness.serve.profiles import RUNNER_FIELDS, SweepSpec, list_profiles, load_profile
from harness.serve.workloads import (
    WORKLOAD_FIELDS,
    WORKLOADS_DIR,
    WorkloadFields,
    WorkloadSpec,
    known_workloads,
    load_workload_spec,
    workload_digest,
)

GLM_ARMS = {
    "hisparse384",
    "hisparse384-nomtp",
    "offload512",
    "offload512-nomtp",
    "upstream-hisparse384",
    "upstream-hisparse384-nomtp",
    "upstream-offload512",
    "upstream-offload512-nomtp",
}


def write(folder: Path, name: str, body: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(textwrap.dedent(body))
    return path


def test_the_blog_workload_is_the_recipe_s_client_command():
    """docs/recipe.md §3: --number 4 16 32 48 64 --parallel 1 8 16 24 32 --dataset-offset 52
    --max-tokens 220, ignore_eos, multi-turn."""
    blog = load_workload_spec("blog-openhands-13turn")
    assert blog.points == [(1, 4), (8, 16), (16, 32), (24, 48), (32, 64)]
    assert (blog.dataset_offset, blog.max_tokens, blog.ignore_eos, blog.multi_turn) == (
        52,
        220,
        True,
        True,
    )


def test_every_glm_profile_names_its_workload_in_its_own_file():
    profiles = {p.name: p for p in list_profiles()}
    for name in GLM_ARMS:
        text = profiles[name].source.read_text()
        assert "workload: blog-openhands-13turn" in text, name
        assert profiles[name].sweep.points == load_workload_spec(profiles[name].workload).points
    for name in ("hisparse384-1m", "offload512-1m"):
        assert profiles[name].workload == "openhands-1m-capacity"
        assert profiles[name].sweep.points == [(1, 1), (5, 5)]
    assert all(p.workload in known_workloads() for p in profiles.values())


def test_sweep_defaults_no_longer_carry_a_workload():
    with pytest.raises(ValidationError) as info:
        SweepSpec.model_validate({})  # the missing fields are the point
    missing = {e["loc"][0] for e in info.value.errors()}
    assert {"points", "dataset_offset", "max_tokens"} <= missing
    assert set(WORKLOAD_FIELDS) | set(RUNNER_FIELDS) == set(SweepSpec.model_fields)


def test_unknown_or_bad_keys_name_the_file_and_key(tmp_path: Path):
    path = write(tmp_path, "w", "points: [[1, 1]]\ndataset_offset: 0\nmax_tokens: 8\nrotate: yes\n")
    with pytest.raises(ConfigError, match=rf"^{path}: key 'rotate': unknown key 'rotate'$"):
        load_workload_spec(str(path))
    path = write(tmp_path, "w2", "points: [[1, 1], [1, 1]]\ndataset_offset: 0\nmax_tokens: 8\n")
    with pytest.raises(ConfigError, match=r"w2.yaml: key 'points': \[1, 1\] given twice"):
        load_workload_spec(str(path))
    path = write(tmp_path, "w3", "points: [[1, 1]]\nmax_tokens: 8\n")
    with pytest.raises(ConfigError, match=r"w3.yaml: key 'dataset_offset': required key missing"):
        load_workload_spec(str(path))
    with pytest.raises(ConfigError, match=r"workload 'no-such' not found \(known: .*cpu-tiny"):
        load_workload_spec("no-such")


def test_a_profile_without_a_workload_is_refused(tmp_path: Path):
    body = "build: cpu-0.32.0\nmodel: m\ngpus: 0\nready_timeout_s: 5\nserve: {}\n"
    path = write(tmp_path, "nowork", body)
    with pytest.raises(ConfigError, match=rf"^{path}: key 'workload': required key missing"):
        load_profile(str(path))


def test_a_profile_names_a_workload_file_beside_it(tmp_path: Path):
    write(tmp_path, "mine", "points: [[2, 3]]\ndataset_offset: 1\nmax_tokens: 5\nslo: ttft=2s\n")
    path = write(tmp_path, "p", "extends: cpu-tiny\nworkload: mine.yaml\n")
    profile = load_profile(str(path))
    assert (profile.sweep.points, profile.sweep.dataset_offset, profile.sweep.max_tokens) == (
        [(2, 3)],
        1,
        5,
    )
    assert profile.sweep.slo == "ttft=2s"
    assert profile.sweep.scrape_interval_s == 0.25  # cpu-tiny's own sweep block still applies
    bad = write(tmp_path, "bad", "extends: cpu-tiny\nworkload: nope.yaml\n")
    with pytest.raises(ConfigError, match=rf"^{bad}: key 'workload': .*nope.yaml"):
        load_profile(str(bad))


def test_overrides_change_the_workload_for_one_run():
    profile = load_profile("cpu-tiny", ["sweep.max_tokens=16", "workload=cpu-tiny-mtp"])
    assert profile.workload == "cpu-tiny-mtp"
    assert profile.sweep.points == [(1, 2), (4, 4), (8, 8)]  # cpu-tiny-mtp's
    assert profile.sweep.max_tokens == 16  # --set sweep.* wins over the workload
    with pytest.raises(ConfigError, match="override 'sweep.max_tokens=0'"):
        load_profile("cpu-tiny", ["sweep.max_tokens=0"])


def test_digest_is_the_content_not_the_name(tmp_path: Path):
    blog = load_workload_spec("blog-openhands-13turn")
    copy = write(tmp_path, "renamed", (WORKLOADS_DIR / "blog-openhands-13turn.yaml").read_text())
    assert workload_digest(load_workload_spec(str(copy))) == workload_digest(blog)
    changed = WorkloadSpec(**{**blog.sweep_fields(), "max_tokens": 221})
    assert workload_digest(changed) != workload_digest(blog)


def test_a_workload_file_and_a_sweep_share_one_declaration_of_the_client_fields():
    assert issubclass(WorkloadSpec, WorkloadFields) and issubclass(SweepSpec, WorkloadFields)
    assert WORKLOAD_FIELDS == tuple(WorkloadFields.model_fields)
    sent = {"points": [[1, 1], [1, 1]], "dataset_offset": 0, "max_tokens": 8}
    for model in (WorkloadSpec, SweepSpec):
        with pytest.raises(ValidationError, match=r"\[1, 1\] given twice"):
            model.model_validate(sent)
        with pytest.raises(ValidationError, match="latency"):
            model.model_validate({**sent, "points": [[1, 1]], "slo": "latency=2s"})


def test_a_resolved_sweep_is_recorded_in_the_order_manifests_always_had():
    """The shared fields are declared first in the model; a manifest's `sweep` (and the run
    table's `sweep` row) keep the order they were written in before the fields were shared."""
    sweep = load_profile("hisparse384").sweep
    assert (
        list(sweep.model_dump())
        == list(json.loads(sweep.model_dump_json()))
        == [
            "points",
            "dataset",
            "dataset_offset",
            "max_tokens",
            "ignore_eos",
            "multi_turn",
            "max_turns",
            "extra_args",
            "scrape_interval_s",
            "point_timeout_s",
            "sleep_between_points_s",
            "warmup_requests",
            "think_time",
            "slo",
        ]
    )
    assert list(load_profile("hisparse384").model_dump()["sweep"]) == list(sweep.model_dump())
