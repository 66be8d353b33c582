"""Pad text: a pool of token ids vended as disjoint spans, and a random fallback.

The pool is tokenized once, by distinct word chunks where that is exact (see chunked.py). A span is vended only where both of its ends are pre-tokenizer
boundaries (see TokenizerHandle.boundary_flags), so decoding it gives text that re-encodes to
exactly the same number of tokens; the cursor skips the few ids needed to find such a start.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from harness.dataset.chunked import WordChunkEncoder, ineligible_reason
from harness.dataset.tok import TokenizerHandle

# R1 markup replaced by a space before encoding (recipe.md §6.4 step 1).
_THINK = re.compile(r"<\s*/?\s*think\s*>", re.IGNORECASE)
_CONTROL = re.compile(r"<\|[^|\n]{0,64}\|>|<｜[^｜\n]{0,64}｜>")
_BATCH_CHARS = 4_000_000  # bounds the memory of one batch (~1.5 M tokens of prose)
_CHECK_CHARS = 300_000  # word chunks are checked against whole documents on this much text


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
        reason = ineligible_reason(tok)
        chunker = WordChunkEncoder(tok) if reason is None else None
        checked = False
        chunks: list[np.ndarray] = []
        breaks: list[np.ndarray] = []  # positions next to a removed control id: never cut there
        doc_starts: list[np.ndarray] = []
        total = 0
        batch: list[str] = []
        batch_chars = 0
        encoded_chars = 0
        control = tok.control_ids

        def flush() -> None:
            nonlocal total, encoded_chars, chunker, reason, checked
            encoded_chars += batch_chars
            if chunker is not None and not checked:
                # First batch: word chunks must give exactly the whole-document ids.
                checked = True
                sample, size = [], 0
                for doc in batch:
                    if size >= _CHECK_CHARS:
                        break
                    sample.append(doc)
                    size += len(doc)
                problem = chunker.check(sample)
                if problem is not None:
                    reason = f"word chunks disagreed with whole documents: {problem}"
                    chunker = None
            if chunker is not None:
                ids, starts = chunker.encode(batch)
            else:
                encoded = tok.encode(batch)
                ids = np.concatenate(encoded)
                starts = np.zeros(len(encoded), dtype=np.int64)
                np.cumsum([len(e) for e in encoded[:-1]], out=starts[1:])
            keep = ~np.isin(ids, control)
            removed = int(len(ids) - keep.sum())
            if removed:
                self.removed_control_ids += removed
                kept_before = np.zeros(len(ids) + 1, dtype=np.int64)
                np.cumsum(keep, out=kept_before[1:])
                # position (in the kept sequence) where each removed id used to sit
                breaks.append(np.unique(kept_before[np.flatnonzero(~keep)]) + total)
                starts = kept_before[starts]
                ids = ids[keep]
            doc_starts.append(starts + total)
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
            if batch_chars >= _BATCH_CHARS or (
                total + batch_chars / chars_per_token >= target_tokens
            ):
                flush()
                batch_chars = 0
        if batch:
            flush()
        self.encoding = "word chunks" if chunker is not None else "whole documents"
        self.encoding_note = reason
        self.distinct_chunks = chunker.distinct_chunks if chunker is not None else None
        self.ids = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int32)
        self.cuts = tok.safe_cuts(self.ids)
        # Joins: where independently encoded documents meet, and removed ids. Only there can a
        # decoded span tokenize differently from the ids it came from.
        self.joins = np.zeros(len(self.ids) + 1, dtype=bool)
        if doc_starts:
            self.joins[np.concatenate(doc_starts)] = True
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
            "encoding": self.encoding,
            "encoding_note": self.encoding_note,
            "distinct_chunks": self.distinct_chunks,
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
