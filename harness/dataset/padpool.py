"""Pad text: a pool of token ids vended as disjoint spans, and a random fallback.

The pool is tokenized once, whole document by whole document (the reference encoding, so no
equivalence check is needed), batched across all cores by the Rust backend: its cost depends on
the amount of text, not on how repetitive it is. The encoded pool can be cached (poolcache.py).
A span is vended only where both of its ends are pre-tokenizer boundaries (see
TokenizerHandle.boundary_flags), so decoding it gives text that re-encodes to exactly the same
number of tokens; the cursor skips the few ids needed to find such a start.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from harness import env as harness_env
from harness.dataset.tok import TokenizerHandle

# R1 markup replaced by a space before encoding (docs/recipe.md §6.4 step 1).
_THINK = re.compile(r"<\s*/?\s*think\s*>", re.IGNORECASE)
_CONTROL = re.compile(r"<\|[^|\n]{0,64}\|>|<｜[^｜\n]{0,64}｜>")
# Everything that decides which ids a document contributes (part of the pool cache key).
SANITIZE_RULES = {
    "think": _THINK.pattern,
    "think_flags": "IGNORECASE",
    "control": _CONTROL.pattern,
    "document": "' ' + strip(markup replaced by ' '); empty documents skipped",
    "removed_ids": "TokenizerHandle.control_ids",
}
_BATCH_CHARS = 4_000_000  # collection decisions are taken per batch of this many characters
_ENCODE_CHARS = 1_000_000  # ... which is encoded in slices of this size (bounds peak memory)


def parallelism() -> str:
    """How many threads the Rust backend's batch encoding can use here. The `tokenizers`
    bindings turn parallelism off in a process forked after it was used (they set
    TOKENIZERS_PARALLELISM=false), which makes the pool encode on one core."""
    setting = (harness_env.text("TOKENIZERS_PARALLELISM") or "").strip().lower()
    if setting in {"0", "false", "off", "no"}:
        return f"1 thread (TOKENIZERS_PARALLELISM={setting})"
    threads = harness_env.text("RAYON_NUM_THREADS") or harness_env.text("RAYON_RS_NUM_CPUS")
    return f"{threads or os.cpu_count()} threads" + (" (RAYON_NUM_THREADS)" if threads else "")


def strip_markup(text: str) -> str:
    return _CONTROL.sub(" ", _THINK.sub(" ", text))


@dataclass
class PadPiece:
    text: str
    tokens: int
    kind: str  # "pool" | "random" | "none"
    start: int | None = None  # pool span [start, start + tokens)
    ids: np.ndarray | None = None  # the ids the text was decoded from
    joins: np.ndarray | None = None  # positions inside `ids` where separately encoded text meets


@dataclass
class EncodedPool:
    """The pool's ids and where independently encoded text meets inside them."""

    ids: np.ndarray  # int32, control ids removed
    doc_starts: np.ndarray  # int64 position of each document's first id
    breaks: np.ndarray  # int64 positions where a removed control id used to sit
    stats: dict = field(default_factory=dict)


def _encode_batch(tok: TokenizerHandle, batch: list[str]) -> list[np.ndarray]:
    encoded: list[np.ndarray] = []
    start, size = 0, 0
    for end, doc in enumerate(batch, 1):
        size += len(doc)
        if size >= _ENCODE_CHARS or end == len(batch):
            encoded += tok.encode(batch[start:end])
            start, size = end, 0
    return encoded


class _Collector:
    """Encodes documents batch by batch and strips control ids, recording joins."""

    def __init__(self, tok: TokenizerHandle):
        self.tok = tok
        self.control = np.zeros(tok.backend.get_vocab_size(with_added_tokens=True), dtype=bool)
        self.control[tok.control_ids] = True
        self.chunks: list[np.ndarray] = []
        self.starts: list[np.ndarray] = []
        self.breaks: list[np.ndarray] = []
        self.total = 0
        self.removed = 0
        self.encoded_chars = 0

    def flush(self, batch: list[str], chars: int) -> None:
        self.encoded_chars += chars
        encoded = _encode_batch(self.tok, batch)
        ids = np.concatenate(encoded)
        starts = np.zeros(len(encoded), dtype=np.int64)
        np.cumsum([len(e) for e in encoded[:-1]], out=starts[1:])
        keep = ~self.control[ids]
        removed = int(len(ids) - keep.sum())
        if removed:
            self.removed += removed
            kept_before = np.zeros(len(ids) + 1, dtype=np.int64)
            np.cumsum(keep, out=kept_before[1:])
            # position (in the kept sequence) where each removed id used to sit
            self.breaks.append(np.unique(kept_before[np.flatnonzero(~keep)]) + self.total)
            starts = kept_before[starts]
            ids = ids[keep]
        self.starts.append(starts + self.total)
        self.chunks.append(ids)
        self.total += len(ids)


def _concat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)


def encode_pool(tok: TokenizerHandle, texts: Iterable[str], target_tokens: int) -> EncodedPool:
    """Documents in order, encoded until the pool holds at least `target_tokens` ids."""
    collector = _Collector(tok)
    documents = 0
    batch: list[str] = []
    batch_chars = 0
    iterator = iter(texts)
    while collector.total < target_tokens:
        text = next(iterator, None)
        if text is None:
            break
        # Documents join as "...end. Next" (non-space | space + non-space): a clean seam.
        cleaned = strip_markup(text).strip()
        if not cleaned:
            continue
        batch.append(" " + cleaned)
        batch_chars += len(cleaned) + 1
        documents += 1
        # Stop batching once the batch likely covers what is missing (chars per token as
        # measured so far), so that little more than the target is ever encoded.
        total = collector.total
        chars_per_token = collector.encoded_chars / total if total else 3.0
        if batch_chars >= _BATCH_CHARS or total + batch_chars / chars_per_token >= target_tokens:
            collector.flush(batch, batch_chars)
            batch, batch_chars = [], 0
    if batch:
        collector.flush(batch, batch_chars)
    stats = {
        "parallelism": parallelism(),
        "documents": documents,
        "removed_control_ids": collector.removed,
        "encoded_chars": collector.encoded_chars,
    }
    return EncodedPool(
        _concat(collector.chunks, np.int32),
        _concat(collector.starts, np.int64),
        _concat(collector.breaks, np.int64),
        stats,
    )


class PadPool:
    """Disjoint spans from one contiguous id pool, collected up to `target_tokens`."""

    def __init__(
        self,
        tok: TokenizerHandle,
        texts: Iterable[str],
        target_tokens: int,
        *,
        encoded: EncodedPool | None = None,
    ):
        """Encode `texts` (or take an already `encoded` pool, e.g. from the cache)."""
        self.tok = tok
        self.target_tokens = target_tokens
        pool = encoded if encoded is not None else encode_pool(tok, texts, target_tokens)
        self.encoded = pool
        self.documents = int(pool.stats.get("documents", 0))
        self.removed_control_ids = int(pool.stats.get("removed_control_ids", 0))
        self.encoding = "whole documents (batched)"
        self.ids = pool.ids
        self.cuts = tok.safe_cuts(self.ids)
        # Joins: where independently encoded documents meet, and removed ids. Only there can a
        # decoded span tokenize differently from the ids it came from.
        self.joins = np.zeros(len(self.ids) + 1, dtype=bool)
        self.joins[pool.doc_starts] = True
        self.cuts[pool.breaks] = False
        self.joins[pool.breaks] = True
        self.cursor = 0
        self.skipped = 0
        self.exhausted_requests = 0

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, target: int) -> PadPiece | None:
        """The next span of exactly `target` ids with clean ends, or None when the pool is short."""
        if target <= 0:
            return PadPiece("", 0, "none")
        window = 4096
        start = self.cursor
        size = len(self.ids)
        while start + target <= size:
            stop = min(start + window, size - target + 1)
            ok = self.cuts[start:stop] & self.cuts[start + target : stop + target]
            hits = np.flatnonzero(ok)
            if len(hits):
                begin = start + int(hits[0])
                self.skipped += begin - self.cursor
                self.cursor = begin + target
                text = self.tok.decode(self.ids[begin : begin + target])
                joins = np.flatnonzero(self.joins[begin + 1 : begin + target]) + 1
                return PadPiece(
                    text, target, "pool", begin, self.ids[begin : begin + target], joins
                )
            start = stop
        self.exhausted_requests += 1
        return None

    def stats(self) -> dict:
        return {
            "pool_tokens": len(self.ids),
            "collect_target": int(self.target_tokens),
            "documents": self.documents,
            "used_tokens": int(self.cursor),
            "skipped_for_alignment": int(self.skipped),
            "removed_control_ids": self.removed_control_ids,
            "encoding": self.encoding,
            "encoded_chars": self.encoded.stats.get("encoded_chars"),
            "encoding_parallelism": self.encoded.stats.get("parallelism"),
            "exhausted_requests": self.exhausted_requests,
        }


def random_pad(tok: TokenizerHandle, rng: np.random.RandomState, target: int) -> PadPiece:
    """`target` whole-word tokens drawn uniformly from the vocabulary: exact by construction."""
    if target <= 0:
        return PadPiece("", 0, "none")
    ids = rng.choice(tok.word_ids, size=target)
    # Every word is its own pre-token, so word|word joins are all alike: windows at both ends
    # and at a few interior points check that kind of join.
    interior = np.linspace(0, target, 6, dtype=np.int64)[1:-1]
    return PadPiece(tok.decode(ids), target, "random", None, ids, np.unique(interior))
