"""Tiny local models: deterministic, built on this machine, never from a hub.

`tiny:<model>` specs resolve to directories under `cache_dir()`; they are built on first use
(file-locked, atomic) and reused after, keyed by a hash of their inputs. Their tokenizer,
`tiny:tokenizer`, lives with the dataset builder that also counts with it
(harness.dataset.tiny); it is re-exported here for the servers and tests that ship it.
"""

from __future__ import annotations

from pathlib import Path

from harness.dataset.tiny import TINY_PREFIX, ensure_tokenizer, resolve_tokenizer
from harness.serve.tiny.models import MODEL_NAMES, ensure_model

__all__ = [
    "MODEL_NAMES",
    "ensure_model",
    "ensure_tokenizer",
    "resolve_model",
    "resolve_tokenizer",
]


def resolve_model(spec: str, python: Path) -> str:
    """`tiny:<name>` -> the cached local model dir (built with `python` on first use);
    anything else (hub id, local path) is returned unchanged."""
    if spec.startswith(TINY_PREFIX):
        return str(ensure_model(spec[len(TINY_PREFIX) :], python))
    return spec
