"""The encoded pad-pool cache: a second build with the same inputs skips the pool and writes the
same bytes; any input change is a different key; broken entries are rebuilt; racing writers
leave one complete entry; the manifest says hit/miss and the key."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import numpy as np
import pytest

from harness.dataset import synthetic
from harness.dataset.builder import build_dataset
from harness.dataset.padpool import PadPool, encode_pool
from harness.dataset.poolcache import PoolCache, pool_key, source_identity
from harness.dataset.recipe import make_recipe
from harness.dataset.sources import Source
from harness.dataset.tok import TokenizerHandle


@pytest.fixture(scope="module")
def tok() -> TokenizerHandle:
    return TokenizerHandle("tiny:tokenizer")


@pytest.fixture()
def cache_root(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("REPRO_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("REPRO_PAD_CACHE", raising=False)
    return tmp_path / "cache" / "padpool"


def _sources(tmp_path: Path) -> tuple[Path, Path]:
    trajectories = tmp_path / "trajectories.jsonl"
    trajectories.write_text(
        "".join(json.dumps(synthetic.trajectory(3, i)) + "\n" for i in range(6))
    )
    pad = tmp_path / "pad.jsonl"
    rows = [
        {"output": synthetic.pad_document(3, i)["output"] + " <think>x</think>"} for i in range(60)
    ]
    pad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return trajectories, pad


def _recipe(trajectories: Path, pad: Path, **extra):
    fields = {"tokenizer": "tiny:tokenizer", "trajectories": str(trajectories)}
    fields.update(pad_source="openscience", pad_text=str(pad), first_turn_length=900)
    fields.update(subsequent_turn_length=40, num_turns=3, number=4)
    fields.update(extra)
    return make_recipe(fields)


def test_second_build_hits_the_cache_and_writes_the_same_bytes(
    tmp_path, tok, cache_root, monkeypatch
):
    trajectories, pad = _sources(tmp_path)
    recipe = _recipe(trajectories, pad)
    cold = build_dataset(recipe, tmp_path / "a.json", tokenizer=tok)
    warm = build_dataset(recipe, tmp_path / "b.json", tokenizer=tok)
    assert cold.manifest["pad_cache"]["status"] == "miss"
    assert warm.manifest["pad_cache"]["status"] == "hit"
    key = cold.manifest["pad_cache"]["key"]
    assert warm.manifest["pad_cache"]["key"] == key and (cache_root / key / "ids.npy").is_file()
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert cold.manifest["pad"]["pool_tokens"] == warm.manifest["pad"]["pool_tokens"]
    assert cold.manifest["pad"]["documents"] == warm.manifest["pad"]["documents"]
    on_disk = json.loads((tmp_path / "b.json.manifest.json").read_text())
    assert on_disk["pad_cache"]["status"] == "hit"
    # Without the cache the same bytes again.
    monkeypatch.setenv("REPRO_PAD_CACHE", "0")
    off = build_dataset(recipe, tmp_path / "c.json", tokenizer=tok)
    assert off.sha256 == cold.sha256 and off.manifest["pad_cache"]["status"] == "off"


def test_any_input_change_is_a_miss(tmp_path, tok, cache_root):
    trajectories, pad = _sources(tmp_path)
    first = build_dataset(_recipe(trajectories, pad), tmp_path / "a.json", tokenizer=tok)
    keys = {first.manifest["pad_cache"]["key"]}
    pad.write_text(pad.read_text().replace("the", "teh", 1))  # one changed character
    changed = build_dataset(_recipe(trajectories, pad), tmp_path / "b.json", tokenizer=tok)
    assert changed.manifest["pad_cache"]["status"] == "miss"
    keys.add(changed.manifest["pad_cache"]["key"])
    bigger = build_dataset(_recipe(trajectories, pad, number=5), tmp_path / "c.json", tokenizer=tok)
    assert bigger.manifest["pad_cache"]["status"] == "miss"
    keys.add(bigger.manifest["pad_cache"]["key"])
    assert len(keys) == 3


def test_key_covers_tokenizer_rules_field_and_split(tmp_path, tok):
    _trajectories, pad = _sources(tmp_path)
    source = Source(str(pad), split="train", revision=None, role="pad text")
    identity = source_identity(source, source.provenance())
    base = {"split": "train", "field": "output", "tok": tok, "target_tokens": 5000}
    key = pool_key(identity, builder_version="b/1", **base)
    assert pool_key(identity, builder_version="b/2", **base) != key
    assert pool_key(identity, builder_version="b/1", **{**base, "field": "text"}) != key
    assert pool_key(identity, builder_version="b/1", **{**base, "split": "test"}) != key
    assert pool_key(identity, builder_version="b/1", **{**base, "target_tokens": 5001}) != key
    other = TokenizerHandle(str(tok.path))
    other.sha256 = "0" * 64  # a different tokenizer file set
    assert pool_key(identity, builder_version="b/1", **{**base, "tok": other}) != key
    from harness.dataset import poolcache

    rules = dict(poolcache.SANITIZE_RULES, think=r"<think>")
    original = poolcache.SANITIZE_RULES
    poolcache.SANITIZE_RULES = rules
    try:
        assert pool_key(identity, builder_version="b/1", **base) != key
    finally:
        poolcache.SANITIZE_RULES = original


def test_unpinned_hub_sources_and_the_switch_turn_the_cache_off(
    tmp_path, tok, cache_root, monkeypatch
):
    hub = Source("org/pad-text", split="train", revision=None, role="pad text")
    assert source_identity(hub, hub.provenance()) is None
    pinned = Source("org/pad-text", split="train", revision="abc123", role="pad text")
    assert source_identity(pinned, pinned.provenance())["revision"] == "abc123"
    trajectories, pad = _sources(tmp_path)
    monkeypatch.setenv("REPRO_PAD_CACHE", "off")
    result = build_dataset(_recipe(trajectories, pad), tmp_path / "a.json", tokenizer=tok)
    assert result.manifest["pad_cache"]["status"] == "off"
    assert "REPRO_PAD_CACHE" in result.manifest["pad_cache"]["reason"]
    assert not cache_root.exists() or not any(cache_root.iterdir())


def test_a_broken_entry_is_rebuilt(tmp_path, tok, cache_root):
    trajectories, pad = _sources(tmp_path)
    recipe = _recipe(trajectories, pad)
    cold = build_dataset(recipe, tmp_path / "a.json", tokenizer=tok)
    entry = cache_root / cold.manifest["pad_cache"]["key"]
    ids = np.load(entry / "ids.npy")
    np.save(entry / "ids.npy", ids[:-7])  # truncated: lengths no longer match meta.json
    again = build_dataset(recipe, tmp_path / "b.json", tokenizer=tok)
    assert again.manifest["pad_cache"]["status"] == "miss"
    assert "ids.npy" in again.manifest["pad_cache"]["note"]
    assert again.sha256 == cold.sha256
    third = build_dataset(recipe, tmp_path / "c.json", tokenizer=tok)
    assert third.manifest["pad_cache"]["status"] == "hit" and third.sha256 == cold.sha256
    ids = np.load(entry / "ids.npy")
    ids[5] = (ids[5] + 1) % 100  # same length, one id changed
    np.save(entry / "ids.npy", ids)
    fourth = build_dataset(recipe, tmp_path / "d.json", tokenizer=tok)
    assert "sha256" in fourth.manifest["pad_cache"]["note"] and fourth.sha256 == cold.sha256


def _store_from_process(args: tuple[str, str, str]) -> str:
    root, key, pad = args
    tok = TokenizerHandle("tiny:tokenizer")
    texts = [json.loads(line)["output"] for line in Path(pad).read_text().splitlines()]
    PoolCache(Path(root)).store(key, encode_pool(tok, texts, 20_000))
    return key


def test_concurrent_writers_leave_one_complete_entry(tmp_path, tok):
    _trajectories, pad = _sources(tmp_path)
    root = tmp_path / "padpool"
    with multiprocessing.get_context("spawn").Pool(3) as workers:
        workers.map(_store_from_process, [(str(root), "k" * 32, str(pad))] * 3)
    assert [p.name for p in root.iterdir()] == ["k" * 32]  # no temporary leftovers
    loaded, problem = PoolCache(root).load("k" * 32)
    assert problem is None and loaded is not None
    texts = [json.loads(line)["output"] for line in pad.read_text().splitlines()]
    fresh = PadPool(tok, texts, 20_000)
    cached = PadPool(tok, [], 20_000, encoded=loaded)
    assert np.array_equal(fresh.ids, cached.ids) and np.array_equal(fresh.joins, cached.joins)
    assert np.array_equal(fresh.cuts, cached.cuts) and fresh.documents == cached.documents
    assert loaded.ids.dtype == np.int32 and isinstance(loaded.ids, np.memmap)


def test_a_cache_that_cannot_be_written_does_not_fail_the_build(
    tmp_path, tok, cache_root, monkeypatch
):
    trajectories, pad = _sources(tmp_path)

    def refuse(self, key, pool):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(PoolCache, "store", refuse)
    result = build_dataset(_recipe(trajectories, pad), tmp_path / "a.json", tokenizer=tok)
    assert result.manifest["pad_cache"]["status"] == "miss"
    assert "No space left" in result.manifest["pad_cache"]["note"]
    assert result.manifest["exactness"]["exact_turns"] == result.manifest["exactness"]["turns"]
