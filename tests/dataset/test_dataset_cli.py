"""`repro dataset build|verify|plan`: the original builder's option names, and ensure_dataset."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import cli
from harness.dataset import DatasetInfo, ensure_dataset


@pytest.fixture()
def trajectories(tmp_path) -> Path:
    from harness.dataset import synthetic

    path = tmp_path / "trajectories.jsonl"
    rows = [synthetic.trajectory(1, i) for i in range(12)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _invoke(args: list[str]):
    return CliRunner().invoke(cli, args, catch_exceptions=False, standalone_mode=False)


def test_build_accepts_the_original_option_names(tmp_path, trajectories):
    pad = tmp_path / "pad.jsonl"
    pad.write_text(
        "".join(json.dumps({"reasoning": f"Consider step {i}. " * 200}) + "\n" for i in range(30))
    )
    out = tmp_path / "openhand-dataset.json"
    result = _invoke(
        [
            "dataset",
            "build",
            "--model",
            "tiny:tokenizer",
            "--dataset-name",
            str(trajectories),
            "--split",
            "train",
            "--only-resolved",
            "--first-turn-length",
            "400",
            "--subsequent-turn-length",
            "30",
            "--num-turns",
            "3",
            "--number",
            "3",
            "--seed",
            "5",
            "--pad-source",
            "openscience",
            "--pad-dataset-name",
            str(pad),
            "--pad-split",
            "train",
            "--pad-text-field",
            "reasoning",
            "--max-real-first-turn-frac",
            "0.25",
            "--max-rows",
            "12",
            "--output-path",
            str(out),
        ]
    )
    assert "3 conversations x 3 turns" in result.output
    meta = json.loads(out.read_text())["metadata"]
    assert meta["model_path"] == "tiny:tokenizer" and meta["only_resolved"] is True
    assert meta["pad_dataset_name"] == str(pad) and meta["first_turn_length"] == 400
    manifest = json.loads(Path(str(out) + ".manifest.json").read_text())
    assert manifest["recipe"]["max_real_first_turn_frac"] == 0.25
    assert manifest["recipe"]["pad_text_field"] == "reasoning" and manifest["recipe"]["seed"] == 5
    assert all(c["turns"][0]["user"] <= 100 for c in manifest["conversations"])
    assert manifest["sources"]["trajectories"]["skipped_unresolved"] > 0


def test_build_recipe_with_overrides_and_fresh_sizing(tmp_path):
    out = tmp_path / "tiny.json"
    result = _invoke(
        [
            "dataset",
            "build",
            "cpu-tiny",
            "--num-turns",
            "2",
            "--fresh-for-sweep",
            "--sweep-offset",
            "2",
            "--sweep-numbers",
            "2",
            "8",
            "30",
            "--output-path",
            str(out),
        ]
    )
    assert "number 32 -> 40" in result.output  # 2..3 reused at 38: c2 wraps into 0-3
    data = json.loads(out.read_text())
    assert len(data["conversations"]) == 40 and data["metadata"]["num_turns"] == 2
    assert data["metadata"]["first_turn_length"] == 512


def test_fresh_for_sweep_needs_a_sweep(tmp_path):
    from harness.errors import ConfigError

    with pytest.raises(ConfigError, match="--fresh-for-sweep needs"):
        _invoke(
            [
                "dataset",
                "build",
                "cpu-tiny",
                "--fresh-for-sweep",
                "--output-path",
                str(tmp_path / "x.json"),
            ]
        )


def test_build_warns_about_reuse(tmp_path):
    result = CliRunner().invoke(
        cli,
        [
            "dataset",
            "build",
            "cpu-tiny",
            "--number",
            "6",
            "--num-turns",
            "2",
            "--sweep-offset",
            "2",
            "--sweep-numbers",
            "2,4,4",
            "--output-path",
            str(tmp_path / "w.json"),
        ],
        catch_exceptions=False,
    )
    assert "warning: point 2" in result.output and "gives every point fresh" in result.output


def test_plan_prints_the_blog_reuse():
    result = _invoke(
        [
            "dataset",
            "plan",
            "--offset",
            "52",
            "--numbers",
            "4",
            "16",
            "32",
            "48",
            "64",
            "--conversations",
            "128",
        ]
    )
    assert "offset   152 (no rotation)  replays 0-63  reused 36" in result.output
    assert "a dataset of 164 conversations" in result.output
    as_json = json.loads(_invoke(["dataset", "plan", "--json"]).output)
    assert as_json["fresh_size"] == 164 and as_json["total_reused"] == 36


def test_verify_command_and_exit_code(tmp_path):
    out = tmp_path / "v.json"
    _invoke(["dataset", "build", "cpu-tiny", "--number", "3", "--output-path", str(out)])
    result = _invoke(
        [
            "dataset",
            "verify",
            str(out),
            "--tokenizer",
            "tiny:tokenizer",
            "--json",
            str(tmp_path / "report.json"),
        ]
    )
    assert "exact turns: 12/12; max |drift| 0" in result.output
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["per_conversation"][0]["turns"][0]["message_tokens"][0] > 0
    data = json.loads(out.read_text())
    data["conversations"][1][2]["messages"][0]["content"] = "short"
    out.write_text(json.dumps(data))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from harness.cli import main; main()",
            "dataset",
            "verify",
            str(out),
            "--tokenizer",
            "tiny:tokenizer",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 2
    assert "error:" in proc.stderr and "1 turns off target" in proc.stderr


def test_every_dataset_command_has_help():
    for command in (["dataset"], ["dataset", "build"], ["dataset", "verify"], ["dataset", "plan"]):
        result = CliRunner().invoke(cli, [*command, "--help"])
        assert result.exit_code == 0 and len(result.output) > 200


def test_ensure_dataset_builds_once_and_reuses(tmp_path, monkeypatch):
    monkeypatch.setenv("REPRO_CACHE", str(tmp_path / "cache"))
    recipe = tmp_path / "mini.yaml"
    recipe.write_text(
        "tokenizer: tiny:tokenizer\ntrajectories: synthetic\npad_source: random\n"
        "first_turn_length: 200\nsubsequent_turn_length: 16\nnum_turns: 3\nnumber: 4\n"
    )
    first = ensure_dataset(str(recipe))
    assert isinstance(first, DatasetInfo)
    assert first.path.is_relative_to(tmp_path / "cache" / "datasets")
    assert (first.num_conversations, first.num_turns) == (4, 3)
    stamp = first.path.stat().st_mtime_ns
    second = ensure_dataset(str(recipe))
    assert second.path == first.path and second.sha256 == first.sha256
    assert first.path.stat().st_mtime_ns == stamp  # reused, not rebuilt
    from_json = ensure_dataset(str(first.path))
    assert (
        from_json.sha256 == first.sha256 and from_json.manifest["output"]["sha256"] == first.sha256
    )
    recipe.write_text(recipe.read_text().replace("number: 4", "number: 5"))
    third = ensure_dataset(str(recipe))
    assert third.path != first.path and third.num_conversations == 5


def test_ensure_dataset_on_a_foreign_json(tmp_path):
    path = tmp_path / "theirs.json"
    path.write_text(
        json.dumps({"conversations": [[{"messages": [{"role": "user", "content": "x"}]}]] * 3})
    )
    info = ensure_dataset(str(path))
    assert (info.num_conversations, info.num_turns) == (3, 1) and info.manifest["metadata"] == {}
    from harness.errors import DatasetError

    with pytest.raises(DatasetError, match="does not exist"):
        ensure_dataset(str(tmp_path / "missing.json"))
