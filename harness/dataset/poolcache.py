"""A cache of encoded pad pools under `cache_dir()/padpool/<key>/`, so that a second build with
the same inputs skips reading and tokenizing the pad text.

The key hashes everything the pool's ids depend on: the pad source's identity (file sha256s,
a pinned hub revision, or the synthetic generator's version and seed), split and field, the
tokenizer's file hashes and control ids, the sanitising rules, the collection target and the
builder and pool-format versions. Unpinned hub sources are not cached (their rows may change).

An entry is a directory of `.npy` arrays (int32 ids, memory-mapped on read) plus `meta.json`
(written last, with the ids' sha256, checked on every read). It is written into a temporary
directory and renamed into place, so readers never see a partial entry; when two builds race,
the first rename wins and the other build's copy is discarded (both hold the same ids). A
malformed entry is reported and rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from harness.dataset.padpool import SANITIZE_RULES, EncodedPool
from harness.dataset.sources import Source
from harness.dataset.tok import TokenizerHandle
from harness.paths import cache_dir

POOL_FORMAT = "repro-padpool/1"
_ARRAYS = {"ids": np.int32, "doc_starts": np.int64, "breaks": np.int64}


def source_identity(source: Source, provenance: dict[str, Any]) -> dict[str, Any] | None:
    """What identifies a source's rows for caching, or None when nothing does."""
    if source.kind == "local":
        return {"kind": "local", "files_sha256": list(provenance["files"].values())}
    if source.kind == "synthetic":
        return {
            "kind": "synthetic",
            "generator": provenance["generator_version"],
            "seed": source.seed,
        }
    if source.revision:
        return {"kind": "hub", "spec": source.spec, "revision": source.revision}
    return None


def pool_key(
    identity: dict[str, Any],
    *,
    split: str,
    field: str,
    tok: TokenizerHandle,
    target_tokens: int,
    builder_version: str,
) -> str:
    blob = {
        "format": POOL_FORMAT,
        "builder": builder_version,
        "source": identity,
        "split": split,
        "field": field,
        "tokenizer_sha256": tok.sha256,
        "control_ids": tok.control_ids.tolist(),
        "sanitize": SANITIZE_RULES,
        "target_tokens": int(target_tokens),
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:32]


class PoolCache:
    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else cache_dir() / "padpool"

    def entry(self, key: str) -> Path:
        return self.root / key

    def load(self, key: str) -> tuple[EncodedPool | None, str | None]:
        """(pool, None) on a hit, (None, None) when absent, (None, why) when unusable."""
        directory = self.entry(key)
        meta_file = directory / "meta.json"
        if not meta_file.is_file():
            return None, None
        try:
            meta = json.loads(meta_file.read_text())
            arrays = {
                name: np.load(directory / f"{name}.npy", mmap_mode="r", allow_pickle=False)
                for name in _ARRAYS
            }
        except (OSError, ValueError, EOFError) as exc:
            return None, f"unreadable entry {directory}: {exc}"
        problem = _check(meta, arrays, key)
        if problem:
            return None, f"entry {directory}: {problem}"
        return EncodedPool(stats=meta["stats"], **arrays), None

    def store(self, key: str, pool: EncodedPool) -> Path:
        """Write the entry atomically (temp dir + rename); an existing entry is kept."""
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.entry(key)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=self.root))
        try:
            for name, dtype in _ARRAYS.items():
                np.save(tmp / f"{name}.npy", np.ascontiguousarray(getattr(pool, name), dtype))
            meta = {
                "format": POOL_FORMAT,
                "key": key,
                "stats": pool.stats,
                "lengths": {name: len(getattr(pool, name)) for name in _ARRAYS},
                "ids_sha256": _digest(pool.ids),
            }
            (tmp / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
            for path in tmp.iterdir():
                with path.open("rb") as handle:
                    os.fsync(handle.fileno())
            try:
                os.rename(tmp, final)
            except OSError:
                if not (final / "meta.json").is_file():  # a broken entry: replace it
                    self.discard(key)
                    try:
                        os.rename(tmp, final)
                    except OSError:
                        pass  # another build has just put its (identical) entry there
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # gone after a successful rename
        return final

    def discard(self, key: str) -> None:
        """Remove an entry (renamed away first, so no reader sees it half-deleted)."""
        final = self.entry(key)
        if not final.exists():
            return
        trash = Path(tempfile.mkdtemp(prefix=f".{key}.trash.", dir=self.root))
        try:
            os.rename(final, trash / "entry")
        except OSError:
            pass  # already gone or replaced
        shutil.rmtree(trash, ignore_errors=True)


def _digest(ids: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(ids, np.int32).data).hexdigest()


def _check(meta: Any, arrays: dict[str, np.ndarray], key: str) -> str | None:
    if not isinstance(meta, dict) or meta.get("format") != POOL_FORMAT or meta.get("key") != key:
        return "format or key mismatch"
    if not isinstance(meta.get("stats"), dict):
        return "no stats"
    for name, dtype in _ARRAYS.items():
        array = arrays[name]
        if array.dtype != dtype or array.ndim != 1:
            return f"{name}.npy has dtype {array.dtype}, shape {array.shape}"
        if meta.get("lengths", {}).get(name) != len(array):
            return f"{name}.npy has {len(array)} entries, meta.json says {meta['lengths']}"
    if meta.get("ids_sha256") != _digest(arrays["ids"]):
        return "ids.npy does not match the sha256 recorded in meta.json"
    n = len(arrays["ids"])
    for name in ("doc_starts", "breaks"):
        if len(arrays[name]) and (arrays[name].min() < 0 or arrays[name].max() > n):
            return f"{name}.npy points outside the pool"
    return None
