"""The padded multi-turn dataset: recipes, sources, builder, verifier, sweep rotation.

`ensure_dataset(spec)` is the entry point for other stages: a recipe name/path is built once
into `cache_dir()/datasets/<key>/` and reused afterwards; a built swe_smith JSON is used as is.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.dataset.builder import BUILDER_VERSION, build_dataset, manifest_path_for
from harness.dataset.recipe import Recipe, load_recipe, recipe_path
from harness.dataset.sources import Source, sha256_file
from harness.dataset.tok import TokenizerHandle
from harness.errors import DatasetError
from harness.paths import cache_dir

__all__ = [
    "BUILDER_VERSION",
    "DatasetInfo",
    "build_dataset",
    "cache_key",
    "ensure_dataset",
    "load_recipe",
]


@dataclass
class DatasetInfo:
    path: Path
    sha256: str
    manifest: dict[str, Any]
    num_conversations: int
    num_turns: int


def _local_stamp(spec: str) -> list[Any] | None:
    """(path, size, mtime) of a local source's files: cheap change detection for the cache key."""
    if spec == "synthetic" or not Path(spec).expanduser().exists():
        return None
    source = Source(spec, split="", revision=None, role="source")
    return [[str(p), p.stat().st_size, p.stat().st_mtime_ns] for p in source.files]


def cache_key(recipe: Recipe, tok: TokenizerHandle) -> str:
    """Hash of the recipe, the tokenizer files, local source stamps and the builder version."""
    blob = {
        "recipe": recipe.fingerprint(),
        "tokenizer": tok.sha256,
        "builder": BUILDER_VERSION,
        "trajectories": _local_stamp(recipe.trajectories),
        "pad": _local_stamp(recipe.pad_text) if recipe.pad_source == "openscience" else None,
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:20]


def _from_json(path: Path, *, strict: bool = False) -> DatasetInfo:
    sha = sha256_file(path)
    sidecar = manifest_path_for(path)
    manifest: dict[str, Any] = {}
    if sidecar.is_file():
        try:
            manifest = json.loads(sidecar.read_text())
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{sidecar}: invalid JSON: {exc}") from exc
        recorded = manifest.get("output", {}).get("sha256")
        if recorded and recorded != sha:
            if strict:  # a file named by the user is used as is: its checksum must hold
                from harness.dataset.verify import checksum_problem

                raise DatasetError(checksum_problem(path, sha) or f"{path}: checksum mismatch")
            manifest = {**manifest, "stale": f"manifest sha256 {recorded[:12]} != file {sha[:12]}"}
    if manifest.get("conversations") and "stale" not in manifest:
        convs = manifest["conversations"]
        num_conversations, num_turns = len(convs), max(len(c["turns"]) for c in convs)
    else:
        from harness.dataset.verify import load_swe_smith

        data = load_swe_smith(path)
        num_conversations = len(data["conversations"])
        num_turns = max((len(c) for c in data["conversations"]), default=0)
        if not manifest:
            manifest = {"metadata": data.get("metadata") or {}}
    return DatasetInfo(path, sha, manifest, num_conversations, num_turns)


def ensure_dataset(spec: str, *, out_dir: Path | None = None) -> DatasetInfo:
    """A ready swe_smith JSON for `spec` (recipe name, recipe path, or a built JSON path)."""
    path = Path(spec).expanduser()
    if path.suffix == ".json":
        if not path.is_file():
            raise DatasetError(f"dataset file {path} does not exist")
        return _from_json(path, strict=True)
    if recipe_path(spec) is None and path.exists():
        raise DatasetError(f"{spec}: expected a recipe (.yaml) or a built dataset (.json)")
    recipe = load_recipe(spec)
    tok = TokenizerHandle(recipe.tokenizer, recipe.tokenizer_revision)
    key = cache_key(recipe, tok)
    directory = Path(out_dir) if out_dir else cache_dir() / "datasets" / key
    directory.mkdir(parents=True, exist_ok=True)
    output = directory / f"{recipe.name or 'dataset'}.json"
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build per key, concurrent callers wait and reuse
        if output.is_file() and manifest_path_for(output).is_file():
            info = _from_json(output)
            if (
                "stale" not in info.manifest
                and info.manifest.get("builder_version") == BUILDER_VERSION
            ):
                return info
        result = build_dataset(recipe, output, tokenizer=tok)
    convs = result.manifest["conversations"]
    return DatasetInfo(result.path, result.sha256, result.manifest, len(convs), recipe.num_turns)
