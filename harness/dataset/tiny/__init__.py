"""The tiny local tokenizer (`tiny:tokenizer`): deterministic, built on this machine, never from a
hub. It resolves to a directory under `cache_dir()`, built on first use (file-locked, atomic) and
reused after, keyed by a hash of its inputs. The dataset builder counts with it; the tiny models
(harness.serve.tiny) ship it.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

from harness.dataset.tiny.cache import ensure_entry
from harness.dataset.tiny.tokenizer import build_tokenizer, provenance
from harness.errors import ConfigError
from harness.paths import cache_dir

__all__ = ["TINY_PREFIX", "TOKENIZER_SPEC", "ensure_tokenizer", "resolve_tokenizer"]

TINY_PREFIX = "tiny:"
TOKENIZER_SPEC = "tiny:tokenizer"


@functools.lru_cache(maxsize=1)
def tokenizer_cache_key() -> str:
    """Hash of everything the tokenizer's bytes depend on (builder source, Python, stdlib files).

    Memoised: hashing 200 stdlib files costs seconds and cannot change within a process.
    """
    blob = json.dumps(provenance(), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def ensure_tokenizer() -> Path:
    """The cached tiny tokenizer directory, built on first use."""
    entry = cache_dir() / "tokenizers" / f"tiny-{tokenizer_cache_key()}"
    entry.parent.mkdir(parents=True, exist_ok=True)
    return ensure_entry(entry, build_tokenizer)


def resolve_tokenizer(spec: str) -> Path:
    """`tiny:tokenizer` -> the cached tiny tokenizer dir; any other spec is a local path."""
    if spec == TOKENIZER_SPEC:
        return ensure_tokenizer()
    if spec.startswith(TINY_PREFIX):
        raise ConfigError(f"unknown tiny tokenizer {spec!r}; the only one is {TOKENIZER_SPEC!r}")
    path = Path(spec).expanduser()
    if not path.exists():
        raise ConfigError(f"tokenizer path {spec!r} does not exist")
    return path
