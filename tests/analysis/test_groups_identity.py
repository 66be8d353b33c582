"""The point-group model and the two run identities.

The identities' values are pinned: manifests and history keys on disk contain them.
"""

from __future__ import annotations

from pathlib import Path

from support.crafted_runs import write_run

from harness.analysis.groups import group_by_point, repeat_aggregates, series_points
from harness.identity import configuration_key, workload_id, workload_identity
from harness.results import load_run

SWEEP = {
    "points": [[1, 2], [4, 8]],
    "dataset_offset": 52,
    "max_tokens": 64,
    "multi_turn": True,
    "max_turns": None,
    "ignore_eos": True,
    "extra_args": {},
}
PROFILE = {"model": "tiny", "serve": {"max-num-seqs": 4, "port": 8000}, "build": "b", "gpus": 0}


def test_configuration_key_is_pinned_and_covers_serve_flags() -> None:
    key = configuration_key(dataset_sha256="abc", sweep=SWEEP, profile=PROFILE)
    assert key == "089a8db6f74ad24a"  # = run.sweep.workload_key before the move
    moved = {**PROFILE, "serve": {"max-num-seqs": 4, "port": 9}}
    assert configuration_key(dataset_sha256="abc", sweep=SWEEP, profile=moved) == key
    other = {**PROFILE, "serve": {"max-num-seqs": 8}}
    assert configuration_key(dataset_sha256="abc", sweep=SWEEP, profile=other) != key


def test_workload_identity_is_pinned_and_ignores_serve_flags() -> None:
    manifest = {"sweep": SWEEP, "dataset": {"sha256": "abc"}, "gpus": 1, "profile": PROFILE}
    identity = workload_identity(manifest)
    assert identity == {
        "dataset_sha256": "abc",
        "points": [[1, 2], [4, 8]],
        "dataset_offset": 52,
        "max_tokens": 64,
        "ignore_eos": True,
        "multi_turn": True,
        "max_turns": None,
        "gpus": 1,
    }
    assert workload_id(identity) == "64bdbdfcf035"  # = gate.regress.workload_hash before the move
    other = {**manifest, "profile": {**PROFILE, "serve": {"max-num-seqs": 8}}, "build": "x"}
    assert workload_id(workload_identity(other)) == workload_id(identity)


def test_groups_and_repeat_aggregates(tmp_path: Path) -> None:
    pts = [
        {"parallel": 4, "number": 8, "repeat": 0, "interactivity": 10.0},
        {"parallel": 1, "number": 2, "repeat": 0, "interactivity": 50.0},
        {"parallel": 4, "number": 8, "repeat": 1, "interactivity": 14.0},
        {"parallel": 4, "number": 8, "repeat": 2, "interactivity": 99.0, "valid": False},
    ]
    run = load_run(write_run(tmp_path / "r", "r", pts))
    groups = group_by_point(run.points)
    assert list(groups) == [(1, 2), (4, 8)] and len(groups[(4, 8)]) == 3
    rows = repeat_aggregates(run.points)
    assert [r["point"] for r in rows] == ["p001-n0002", "p004-n0008"]
    assert rows[1]["repeats"] == 3 and rows[1]["valid_repeats"] == 2
    assert rows[1]["interactivity"] == 12.0  # the invalid repeat is left out
    assert (rows[1]["interactivity_ci_low"], rows[1]["interactivity_ci_high"]) == (10.0, 14.0)
    assert rows[0]["mean_ttft_ms"] is None and rows[0]["mean_ttft_ms_ci_low"] is None
    reduced = series_points(run)
    assert reduced[1].values["interactivity"] == rows[1]["interactivity"]
