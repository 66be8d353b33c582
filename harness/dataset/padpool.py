"""Pad text: a pool of token ids vended as disjoint spans, and a random fallback.

The pool is tokenized once. A span is vended only where both of its ends are pre-tokenizer
boundaries (see TokenizerHandle.boundary_flags), so decoding it gives text that re-encodes to
exactly the same number of tokens; the cursor skips the few ids needed to find such a start.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from harness.dataset.tok import TokenizerHandle

# R1 markup replaced by a space before encoding (recipe.md §6.4 step 1).
_THINK = re.compile(r"<\s*/?\s*think\s*>", re.IGNORECASE)
_CONTROL = re.compile(r"<\|[^|\n]{0,64}\|>|<｜[^｜\n]{0,64}｜>")
_ENCODE_BATCH_DOCS = 64


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


class PadPool:
    """Disjoint spans from one contiguous id pool, collected up to `target_tokens`."""

    def __init__(self, tok: TokenizerHandle, texts: Iterable[str], target_tokens: int):
        self.tok = tok
        self.target_tokens = target_tokens
        self.documents = 0
        self.removed_control_ids = 0
        chunks: list[np.ndarray] = []
        breaks: list[np.ndarray] = []  # positions next to a removed control id: never cut there
        doc_starts: list[int] = []
        total = 0
        batch: list[str] = []
        batch_chars = 0
        encoded_chars = 0
        control = tok.control_ids

        def flush() -> None:
            nonlocal total, encoded_chars
            encoded_chars += sum(len(text) for text in batch)
            for ids in tok.encode(batch):
                keep = ~np.isin(ids, control)
                removed = int(len(ids) - keep.sum())
                if removed:
                    self.removed_control_ids += removed
                    # position (in the kept sequence) where each removed id used to sit
                    kept_before = np.cumsum(keep)[~keep]
                    breaks.append(np.unique(kept_before) + total)
                    ids = ids[keep]
                doc_starts.append(total)
                chunks.append(ids)
                total += len(ids)
            batch.clear()

        iterator = iter(texts)
        while total < target_tokens:
            text = next(iterator, None)
            if text is None:
                break
            # Documents join as "...end. Next" (non-space | space + non-space): a clean seam.
            cleaned = strip_markup(text).strip()
            if not cleaned:
                continue
            batch.append(" " + cleaned)
            batch_chars += len(cleaned) + 1
            self.documents += 1
            # Stop batching once the batch likely covers what is missing (chars per token as
            # measured so far), so that little more than the target is ever encoded.
            chars_per_token = encoded_chars / total if total else 3.0
            if len(batch) >= _ENCODE_BATCH_DOCS or (
                total + batch_chars / chars_per_token >= target_tokens
            ):
                flush()
                batch_chars = 0
        if batch:
            flush()
        self.ids = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int32)
        self.cuts = tok.safe_cuts(self.ids)
        # Joins: where independently encoded text meets (document starts, removed ids). Only
        # there can a decoded span tokenize differently from the ids it came from.
        self.joins = np.zeros(len(self.ids) + 1, dtype=bool)
        self.joins[np.asarray(doc_starts, dtype=np.int64)] = True
        for positions in breaks:
            self.cuts[positions] = False
            self.joins[positions] = True
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
