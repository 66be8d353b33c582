"""Bad input: clear errors naming the problem, and nothing half-written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.dataset.builder import build_dataset
from harness.dataset.cli_support import check_output
from harness.dataset.recipe import load_recipe, make_recipe
from harness.dataset.tok import TokenizerHandle
from harness.errors import ConfigError, DatasetError


@pytest.fixture(scope="module")
def tok() -> TokenizerHandle:
    return TokenizerHandle("tiny:tokenizer")


def _recipe(**fields):
    base = {
        "tokenizer": "tiny:tokenizer",
        "trajectories": "synthetic",
        "pad_source": "random",
        "first_turn_length": 300,
        "subsequent_turn_length": 20,
        "num_turns": 3,
        "number": 3,
    }
    base.update(fields)
    return make_recipe(base)


def test_unknown_recipe_key_names_file_and_key(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("tokenizer: tiny:tokenizer\nfirst_turn_lenght: 10\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml.*unknown key 'first_turn_lenght'"):
        load_recipe(str(path))


def test_invalid_values_are_named(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("num_turns: 0\npad_source: lorem\n")
    with pytest.raises(ConfigError) as info:
        load_recipe(str(path))
    assert "num_turns" in str(info.value) and "pad_source" in str(info.value)
    with pytest.raises(ConfigError, match="not found"):
        load_recipe("no-such-recipe")


def test_shipped_recipes_validate():
    blog = load_recipe("openhands-glm53")
    assert (blog.first_turn_length, blog.subsequent_turn_length, blog.num_turns, blog.number) == (
        74160,
        753,
        13,
        128,
    )
    assert blog.trajectories_revision == "35455389ab51bf5e2306bfd436ef72d0f98bf882"
    assert blog.pad_revision == "174b02c9cdf231f220765b2a1d5ece4550921894"
    assert blog.tokenizer == "zai-org/GLM-5.3" and blog.pad_budget() == 10_649_088
    tiny = load_recipe("cpu-tiny")
    assert (tiny.tokenizer, tiny.trajectories, tiny.pad_source) == (
        "tiny:tokenizer",
        "synthetic",
        "random",
    )
    assert (
        tiny.first_turn_length,
        tiny.subsequent_turn_length,
        tiny.num_turns,
        tiny.number,
        tiny.seed,
    ) == (512, 48, 4, 32, 42)
    load_recipe("openhands-offline")


def test_empty_trajectories(tmp_path, tok):
    path = tmp_path / "empty.jsonl"
    rows = [
        {"trajectory": []},
        {"trajectory": [{"role": "assistant", "content": "hi"}]},
        {"trajectory": [{"role": "user", "content": ""}]},
        {"no_trajectory": 1},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.json"
    with pytest.raises(DatasetError, match=r"only 0 usable conversations in 4 rows \(4 empty"):
        build_dataset(_recipe(trajectories=str(path)), out, tokenizer=tok)
    assert not out.exists()


def test_only_resolved_filter_counts_unresolved(tmp_path, tok):
    path = tmp_path / "t.jsonl"
    rows = [
        {"trajectory": [{"role": "user", "content": f"task {i}"}], "resolved": i % 2}
        for i in range(5)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DatasetError, match="3 unresolved"):
        build_dataset(
            _recipe(trajectories=str(path), only_resolved=True), tmp_path / "o.json", tokenizer=tok
        )
    result = build_dataset(
        _recipe(trajectories=str(path), only_resolved=True, number=2),
        tmp_path / "o.json",
        tokenizer=tok,
    )
    data = json.loads(result.path.read_text())
    assert [c[0]["messages"][1]["content"] for c in data["conversations"]] == ["task 1", "task 3"]


def test_unknown_tokenizer():
    with pytest.raises(DatasetError, match="unknown tokenizer 'nobody/no-such-tokenizer'"):
        TokenizerHandle("nobody/no-such-tokenizer")
    with pytest.raises(DatasetError, match="unknown tokenizer"):
        TokenizerHandle("./not/a/dir")
    with pytest.raises(DatasetError, match="tiny:nope"):
        TokenizerHandle("tiny:nope")


def test_missing_source_and_field(tmp_path, tok):
    with pytest.raises(DatasetError, match="no such file"):
        build_dataset(_recipe(trajectories="./missing.parquet"), tmp_path / "o.json", tokenizer=tok)
    pad = tmp_path / "pad.jsonl"
    pad.write_text(json.dumps({"text": "no output field"}) + "\n")
    with pytest.raises(DatasetError, match="no field 'output'"):
        build_dataset(
            _recipe(pad_source="openscience", pad_text=str(pad)), tmp_path / "o.json", tokenizer=tok
        )


def test_exhausted_pad_pool_falls_back_to_random_and_reports_it(tmp_path, tok):
    pad = tmp_path / "pad.jsonl"
    pad.write_text(json.dumps({"output": "A short reasoning trace about entropy. " * 20}) + "\n")
    result = build_dataset(
        _recipe(pad_source="openscience", pad_text=str(pad)), tmp_path / "o.json", tokenizer=tok
    )
    pad_info = result.manifest["pad"]
    assert pad_info["random_fallbacks"] > 0
    assert pad_info["pool_tokens"] < pad_info["needed_tokens"]
    kinds = {t["pad_kind"] for c in result.manifest["conversations"] for t in c["turns"]}
    assert {"pool", "random"} <= kinds
    assert result.manifest["exactness"]["exact_turns"] == 3 * 3


def test_unwritable_output_is_a_clear_error_and_writes_nothing(tmp_path, tok):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(DatasetError, match="cannot be created"):
        build_dataset(_recipe(), blocker / "sub" / "out.json", tokenizer=tok)
    directory = tmp_path / "a-dir.json"
    directory.mkdir()
    with pytest.raises(DatasetError, match="is a directory"):
        build_dataset(_recipe(), directory, tokenizer=tok)


def test_failed_check_leaves_no_file(tmp_path, tok, monkeypatch):
    """If re-tokenization disagrees beyond tolerance, the build fails and writes nothing."""
    real_count = TokenizerHandle.count

    def off_by_one(self, texts):
        return [n + 1 for n in real_count(self, texts)]

    out = tmp_path / "never.json"
    monkeypatch.setattr(TokenizerHandle, "count", off_by_one)
    with pytest.raises(DatasetError, match="miss their token target beyond tolerance 0"):
        build_dataset(_recipe(), out, tokenizer=tok)
    assert not out.exists() and not Path(str(out) + ".manifest.json").exists()
    assert not list(tmp_path.iterdir())


def test_parquet_and_jsonl_sources_give_the_same_dataset(tmp_path, tok):
    """Raw nebius-shaped rows (nested trajectory structs) read the same from parquet and JSONL."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from harness.dataset import synthetic

    rows = [synthetic.trajectory(9, i) for i in range(4)]
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    parquet = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    a = build_dataset(_recipe(trajectories=str(jsonl)), tmp_path / "a.json", tokenizer=tok)
    b = build_dataset(_recipe(trajectories=str(parquet)), tmp_path / "b.json", tokenizer=tok)
    conv_a = json.loads(a.path.read_text())["conversations"]
    conv_b = json.loads(b.path.read_text())["conversations"]
    assert conv_a == conv_b


def test_an_existing_output_is_never_replaced_silently(tmp_path) -> None:
    out = tmp_path / "ds.json"
    check_output(out, force=False)  # nothing there: fine
    (tmp_path / "ds.json.manifest.json").write_text("{}")  # a manifest alone also counts
    with pytest.raises(DatasetError, match="ds.json.manifest.json: already exists.*--force"):
        check_output(out, force=False)
    out.write_text("{}")
    with pytest.raises(DatasetError, match="ds.json: already exists"):
        check_output(out, force=False)
    check_output(out, force=True)
    assert out.read_text() == "{}"  # the check writes nothing


def test_an_unwritable_output_fails_before_the_build(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(DatasetError, match=f"--output-path {blocker}/ds.json: cannot write"):
        check_output(blocker / "ds.json", force=False)
