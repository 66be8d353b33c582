"""Trajectory and pad-text sources: hub ids (network), local parquet/JSONL (always), synthetic.

Rows are yielded in source order (the original consumes trajectories in dataset order, without
shuffling). A source's provenance (kind, revision, files and their sha256) goes in the manifest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness import env as harness_env
from harness.dataset.recipe import SYNTHETIC
from harness.errors import DatasetError

LOCAL_SUFFIXES = (".parquet", ".jsonl", ".json")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _local_files(path: Path) -> list[Path]:
    if path.is_file():
        if not path.name.endswith(LOCAL_SUFFIXES):
            raise DatasetError(f"{path}: unsupported file type (want .parquet, .jsonl or .json)")
        return [path]
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(LOCAL_SUFFIXES))
    if not files:
        raise DatasetError(f"{path}: no .parquet/.jsonl/.json files inside")
    return files


def _iter_file(path: Path) -> Iterator[dict[str, Any]]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            parquet = pq.ParquetFile(path)
        except Exception as exc:
            raise DatasetError(f"{path}: not a readable parquet file: {exc}") from exc
        for batch in parquet.iter_batches(batch_size=64):
            yield from batch.to_pylist()
    elif path.suffix == ".jsonl":
        with path.open(encoding="utf-8") as handle:
            for line_no, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DatasetError(f"{path}:{line_no}: invalid JSON: {exc}") from exc
    else:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}: invalid JSON: {exc}") from exc
        rows = (
            data if isinstance(data, list) else data.get("rows") if isinstance(data, dict) else None
        )
        if not isinstance(rows, list):
            raise DatasetError(
                f"{path}: a .json source must be a list of rows (or {{'rows': [...]}})"
            )
        yield from rows


def is_local(spec: str) -> bool:
    return Path(spec).expanduser().exists()


class Source:
    """Rows of one source plus where they came from."""

    def __init__(self, spec: str, *, split: str, revision: str | None, role: str, seed: int = 0):
        self.spec = spec
        self.split = split
        self.revision = revision
        self.role = role
        self.seed = seed
        self.hub_backend: str | None = None  # which hub served the rows, once read
        path = Path(spec).expanduser()
        if spec == SYNTHETIC:
            self.kind = "synthetic"
            self.files: list[Path] = []
        elif path.exists():
            self.kind = "local"
            self.files = _local_files(path)
        elif spec.startswith((".", "/", "~")) or spec.count("/") != 1:
            raise DatasetError(
                f"{role} source {spec!r}: no such file or directory (and not a hub id)"
            )
        else:
            self.kind = "hub"
            self.files = []

    def provenance(self) -> dict[str, Any]:
        info: dict[str, Any] = {"spec": self.spec, "kind": self.kind, "split": self.split}
        if self.kind == "hub":
            info["revision"] = self.revision or "main (unpinned)"
            info["served_by"] = self.hub_backend
        if self.kind == "local":
            info["files"] = {str(p): sha256_file(p) for p in self.files}
        if self.kind == "synthetic":
            from harness.dataset import synthetic

            info["generator_version"] = synthetic.GENERATOR_VERSION
            info["seed"] = self.seed
        return info

    def rows(self) -> Iterator[dict[str, Any]]:
        if self.kind == "local":
            for path in self.files:
                yield from _iter_file(path)
        elif self.kind == "synthetic":
            from harness.dataset import synthetic

            if self.role == "trajectories":
                yield from synthetic.trajectories(self.seed)
            else:
                yield from synthetic.pad_documents(self.seed)
        else:
            yield from _iter_hub(self)


# Which recipe keys name a source's repo and revision (for error messages).
RECIPE_KEYS = {
    "trajectories": ("trajectories", "trajectories_revision"),
    "pad text": ("pad_text", "pad_revision"),
}


def hub_offline() -> bool:
    return harness_env.flag("HF_HUB_OFFLINE", False)


def cached_dataset_snapshot(spec: str, revision: str | None) -> Path:
    """The hub-cache snapshot of dataset `spec` at `revision` (HF_HUB_OFFLINE=1).

    Offline, `datasets.load_dataset(repo_id, revision=...)` never reads the hub cache and ignores
    the revision (it falls back to "the latest cached version" of a prepared dataset), so the
    pinned snapshot is resolved with huggingface_hub and loaded as a local folder.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.constants import HF_HUB_CACHE

    home = harness_env.text("HF_HOME")
    cache = harness_env.text("HF_HUB_CACHE") or (str(Path(home) / "hub") if home else HF_HUB_CACHE)
    try:
        return Path(
            snapshot_download(
                spec, repo_type="dataset", revision=revision, cache_dir=cache, local_files_only=True
            )
        )
    except Exception as exc:  # LocalEntryNotFoundError and friends
        folder = Path(cache) / f"datasets--{spec.replace('/', '--')}" / "snapshots"
        have = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
        raise LookupError(
            f"HF_HUB_OFFLINE=1 and revision {revision or 'main'} is not in the hub cache "
            f"{folder.parent} (cached revisions: {', '.join(have) or 'none'}; "
            f"{type(exc).__name__})"
        ) from exc


def _open_datasets(spec: str, split: str, revision: str | None) -> Iterator[dict[str, Any]]:
    from datasets import load_dataset

    if hub_offline():
        local = cached_dataset_snapshot(spec, revision)
        return iter(load_dataset(str(local), split=split, streaming=True))
    return iter(load_dataset(spec, split=split, revision=revision, streaming=True))


def _open_modelscope(spec: str, split: str, revision: str | None) -> Iterator[dict[str, Any]]:
    # HF_HUB_OFFLINE=1 means no hub at all: ModelScope would otherwise go to the network and
    # wait out its download deadline before failing
    if hub_offline():
        raise LookupError("HF_HUB_OFFLINE=1: ModelScope is a hub too and is not contacted")
    from modelscope import MsDataset

    return iter(MsDataset.load(spec, split=split, version=revision))


HUB_BACKENDS = {"datasets": _open_datasets, "modelscope": _open_modelscope}


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _iter_hub(source: Source) -> Iterator[dict[str, Any]]:
    """Rows from Hugging Face `datasets` (streaming, in order), else ModelScope. A backend is
    chosen once its first row arrives; a failure after that is an error, never a silent switch
    to the other hub (which would replay the first rows)."""
    spec, split, revision, role = source.spec, source.split, source.revision, source.role
    errors: list[str] = []
    for name, open_rows in HUB_BACKENDS.items():
        try:
            rows = open_rows(spec, split, revision)
            first = next(rows, None)
        except Exception as exc:  # noqa: BLE001 - any failure means: try the next hub
            errors.append(f"{name}: {_first_line(exc)}")
            continue
        if first is None:
            errors.append(f"{name}: split {split!r} has no rows")
            continue
        source.hub_backend = name
        yield first
        count = 1
        try:
            for row in rows:
                yield row
                count += 1
        except Exception as exc:
            raise DatasetError(
                f"{role} source {spec!r}: reading from {name} failed after {count} rows "
                f"({_first_line(exc)})"
            ) from exc
        return
    repo_key, rev_key = RECIPE_KEYS.get(role, ("source", "revision"))
    raise DatasetError(
        f"{role} source {spec!r} (split {split!r}, revision {revision or 'unpinned'}; recipe "
        f"keys {repo_key} / {rev_key}) could not be loaded from a hub ({'; '.join(errors)}); "
        f"pass a local parquet/JSONL file or 'synthetic'"
    )


def flatten_content(content: Any) -> str:
    """A message content as text: lists keep their text blocks and plain strings, '\\n'-joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text") or ""))
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return "" if content is None else str(content)


def user_messages(row: dict[str, Any]) -> list[str]:
    """The user messages of one trajectory row, normalised as the original does
    (docs/recipe.md §6.3): empty content/role dropped, tool -> user, other roles dropped, only user texts kept."""
    trajectory = row.get("trajectory")
    if isinstance(trajectory, str):
        try:
            trajectory = json.loads(trajectory)
        except json.JSONDecodeError:
            return []
    if not isinstance(trajectory, list):
        return []
    texts = []
    for message in trajectory:
        if not isinstance(message, dict):
            continue
        role = message.get("role") or ""
        content = flatten_content(message.get("content"))
        if not content or not role:
            continue
        if role == "tool":
            role = "user"
        if role == "user":
            texts.append(content)
    return texts


def collect_conversations(
    source: Source, *, number: int, only_resolved: bool, max_rows: int | None
) -> tuple[list[list[str]], dict[str, int]]:
    """The user messages of the first `number` usable rows, and scan statistics."""
    conversations: list[list[str]] = []
    stats = {"rows_scanned": 0, "skipped_empty": 0, "skipped_unresolved": 0}
    columns: list[str] | None = None
    for row in source.rows():
        if max_rows is not None and stats["rows_scanned"] >= max_rows:
            break
        stats["rows_scanned"] += 1
        if not isinstance(row, dict):
            raise DatasetError(
                f"trajectories {source.spec!r}: row {stats['rows_scanned']} is not an object"
            )
        if columns is None:
            columns = sorted(row)
            if "trajectory" not in row:
                raise DatasetError(
                    f"trajectories {source.spec!r} (recipe key `trajectories`, split "
                    f"{source.split!r}, revision {source.revision or 'unpinned'}): rows have no "
                    f"'trajectory' column (columns: {', '.join(columns)})"
                )
        if only_resolved and row.get("resolved") != 1 and row.get("resolved") is not True:
            stats["skipped_unresolved"] += 1
            continue
        messages = user_messages(row)
        if not messages:
            stats["skipped_empty"] += 1
            continue
        conversations.append(messages)
        if len(conversations) >= number:
            break
    if len(conversations) < number:
        raise DatasetError(
            f"trajectories {source.spec!r}: only {len(conversations)} usable conversations in "
            f"{stats['rows_scanned']} rows ({stats['skipped_empty']} empty, "
            f"{stats['skipped_unresolved']} unresolved), {number} needed"
        )
    return conversations, stats


def iter_pad_texts(source: Source, field: str) -> Iterator[str]:
    for index, row in enumerate(source.rows()):
        if not isinstance(row, dict) or field not in row:
            raise DatasetError(
                f"pad text {source.spec!r} (revision {source.revision or 'unpinned'}): row "
                f"{index} has no field {field!r} (columns: "
                f"{', '.join(sorted(row)) if isinstance(row, dict) else type(row).__name__}); set "
                f"recipe key `pad_text_field` (--pad-text-field)"
            )
        value = row[field]
        if isinstance(value, str) and value:
            yield value
