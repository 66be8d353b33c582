"""Planner, workload key, dry run, CLI validation and the median CI (no server needed)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from harness.analysis.stats import median_ci, median_ci_coverage
from harness.cli import cli
from harness.client.plan import plan_points
from harness.errors import ConfigError
from harness.identity import configuration_key as workload_key

BLOG = [(1, 4), (8, 16), (16, 32), (24, 48), (32, 64)]


def test_blog_offsets_and_conversations_match_the_single_command():
    plan = plan_points(BLOG, dataset_offset=52, num_conversations=128)
    assert [p.dataset_offset for p in plan] == [52, 56, 72, 104, 152]
    assert [p.label for p in plan] == ["c1", "c8", "c16", "c24", "c32"]
    assert plan[0].conversations == [52, 53, 54, 55]
    assert plan[3].conversations == list(range(104, 128)) + list(range(24))
    assert plan[4].conversations == list(range(64))  # offset >= 128: no rotation
    reused = set(plan[4].conversations) & set().union(*(p.conversations for p in plan[:4]))
    assert len(reused) == 36


def test_only_points_keep_the_full_sweep_offsets():
    plan = plan_points(BLOG, dataset_offset=52, num_conversations=128, only=["c16,c32"])
    assert [(p.label, p.dataset_offset) for p in plan] == [("c16", 72), ("c32", 152)]
    with pytest.raises(ConfigError, match="c12"):
        plan_points(BLOG, dataset_offset=52, num_conversations=128, only=["c12"])


def test_repeats_are_repeat_major_with_fresh_conversations():
    plan = plan_points([(1, 2), (4, 8)], dataset_offset=2, num_conversations=32, repeats=2)
    assert [p.point_id for p in plan] == [
        "p001-n0002-r0",
        "p004-n0008-r0",
        "p001-n0002-r1",
        "p004-n0008-r1",
    ]
    assert plan[2].conversations == [4, 5] and plan[3].conversations == list(range(12, 20))
    with pytest.raises(ConfigError):
        plan_points([(1, 2)], dataset_offset=0, num_conversations=4, repeats=0)


def test_workload_key_ignores_port_and_host_but_not_serve_flags():
    sweep = {
        "points": [[1, 2]],
        "dataset_offset": 2,
        "max_tokens": 64,
        "multi_turn": True,
        "max_turns": None,
        "ignore_eos": True,
        "extra_args": {},
    }
    profile = {"model": "m", "build": "b", "gpus": 0, "serve": {"max-model-len": 4096, "port": 1}}
    key = workload_key(dataset_sha256="abc", sweep=sweep, profile=profile)
    moved = {**profile, "serve": {"max-model-len": 4096, "port": 2, "host": "0.0.0.0"}}
    assert workload_key(dataset_sha256="abc", sweep=sweep, profile=moved) == key
    degraded = {**profile, "serve": {"max-model-len": 1920}}
    assert workload_key(dataset_sha256="abc", sweep=sweep, profile=degraded) != key
    assert workload_key(dataset_sha256="abd", sweep=sweep, profile=profile) != key
    assert (
        workload_key(dataset_sha256="abc", sweep={**sweep, "max_tokens": 65}, profile=profile)
        != key
    )


def test_dry_run_prints_plan_and_writes_nothing(tmp_path):
    conversations = [[{"messages": [{"role": "user", "content": str(i)}]}] * 2 for i in range(8)]
    dataset = tmp_path / "d.json"
    dataset.write_text(json.dumps({"conversations": conversations}))
    out = tmp_path / "runs"
    result = CliRunner().invoke(
        cli,
        [
            "sweep",
            "--profile",
            "cpu-tiny",
            "--dry-run",
            "--dataset",
            str(dataset),
            "--out",
            str(out),
            "--set",
            "sweep.max_tokens=33",
        ],
    )
    assert result.exit_code == 0, result.output
    text = result.output
    assert "p001-n0002-r0 (c1): offset 2, 2 conversations [2-3], 4 requests" in text
    assert "p004-n0008-r0 (c4): offset 4" in text and "reuses conversations" in text
    assert "vllm serve" in text and "--max-model-len 4096" in text
    assert "--no-test-connection" in text and "--max-tokens 33" in text
    assert not out.exists()


def test_bad_override_is_a_clear_error(tmp_path):
    result = CliRunner().invoke(
        cli, ["sweep", "--profile", "cpu-tiny", "--dry-run", "--set", "sweep.nonsense=1"]
    )
    assert result.exit_code != 0
    assert "nonsense" in str(result.exception) + result.output


def test_median_ci_order_statistics():
    assert median_ci([3.0]) == (3.0, 3.0, 3.0)
    med, low, high = median_ci([5, 1, 4, 2, 3])
    assert (med, low, high) == (3.0, 1.0, 5.0)  # n=5: only the full range, coverage 93.75 %
    assert median_ci_coverage(5) == pytest.approx(0.9375)
    values = list(range(1, 11))
    assert median_ci(values) == (5.5, 2.0, 9.0)
    assert median_ci_coverage(10) >= 0.95
    with pytest.raises(ValueError):
        median_ci([])
