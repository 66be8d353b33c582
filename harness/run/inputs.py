"""What a sweep needs to know about its dataset before it runs anything."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config import read_yaml
from harness.dataset import ensure_dataset
from harness.errors import DatasetError
from harness.paths import DATASETS_DIR


@dataclass
class DatasetFacts:
    path: Path | None
    sha256: str | None
    num_conversations: int
    num_turns: int
    manifest: dict[str, Any]
    built: bool

    def record(self, spec: str) -> dict[str, Any]:
        """The manifest's `dataset` entry (per-conversation detail stays in the dataset's own
        manifest file)."""
        return {
            "spec": spec,
            "path": str(self.path),
            "sha256": self.sha256,
            "num_conversations": self.num_conversations,
            "num_turns": self.num_turns,
            "manifest": {k: v for k, v in self.manifest.items() if k != "conversations"},
        }


def _from_json_file(path: Path) -> DatasetFacts:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"dataset {path}: not a readable swe_smith JSON ({exc})") from None
    conversations = data.get("conversations") if isinstance(data, dict) else None
    if not isinstance(conversations, list):
        raise DatasetError(f"dataset {path}: no 'conversations' list (not a swe_smith JSON)")
    turns = len(conversations[0]) if conversations else 0
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return DatasetFacts(path, digest, len(conversations), turns, data.get("metadata") or {}, True)


def _from_recipe(spec: str, path: Path) -> DatasetFacts:
    recipe = path if path.suffix in (".yaml", ".yml") else DATASETS_DIR / f"{spec}.yaml"
    if not recipe.is_file():
        raise DatasetError(
            f"dataset {spec!r}: no built JSON, recipe file or {DATASETS_DIR}/{spec}.yaml"
        )
    data = read_yaml(recipe, "dataset recipe", error=DatasetError) or {}
    try:
        number, turns = int(data.get("number", 0)), int(data.get("num_turns", 0))
    except (TypeError, ValueError, AttributeError) as exc:
        raise DatasetError(f"dataset recipe {recipe}: unreadable ({exc})") from None
    return DatasetFacts(None, None, number, turns, {"recipe": str(recipe)}, False)


def inspect_dataset(spec: str, *, build: bool) -> DatasetFacts:
    """Ensure (build or reuse) the dataset; with build=False (dry run) only inspect it."""
    path = Path(spec).expanduser()
    if build:
        info = ensure_dataset(spec)
        return DatasetFacts(
            Path(info.path),
            info.sha256,
            info.num_conversations,
            info.num_turns,
            dict(info.manifest or {}),
            True,
        )
    if path.suffix == ".json":
        if not path.is_file():
            raise DatasetError(f"dataset file {path} does not exist")
        return _from_json_file(path)
    return _from_recipe(spec, path)


def subsequent_turn_length(manifest: dict[str, Any]) -> int | None:
    for where in (manifest, manifest.get("recipe"), manifest.get("metadata")):
        if isinstance(where, dict) and where.get("subsequent_turn_length"):
            return int(where["subsequent_turn_length"])
    return None


def effective_turns(dataset_turns: int, max_turns: int | None) -> int:
    return min(dataset_turns, max_turns) if max_turns else dataset_turns
