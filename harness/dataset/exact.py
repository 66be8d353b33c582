"""The builder's pre-write check: every turn re-tokenized against its target, drifting seams
repaired by re-vending their pad (docs/recipe.md §6.6 "Exactness")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.dataset.padpool import PadPiece
from harness.dataset.recipe import Recipe
from harness.dataset.tok import TokenizerHandle
from harness.errors import DatasetError

MAX_REPAIRS = 4
REPAIR_SLACK = 8  # a repair tries pad lengths within +-8 tokens of the corrected target


@dataclass
class Piece:
    """A real (trajectory) text cut to at most `limit` tokens."""

    text: str
    tokens: int
    real_tokens: int | None  # full bare length when known (None: longer than what was encoded)
    truncated: bool
    ids: np.ndarray


@dataclass
class TurnPlan:
    real: Piece
    pad: PadPiece | None = None
    counts: dict[str, int] = field(default_factory=dict)
    repairs: int = 0
    first_drift: int = 0


# (conversation, turn, target) -> a fresh pad piece of that many tokens
Vend = Callable[[int, int, int], PadPiece]


def _repair(
    tok: TokenizerHandle, vend: Vend, plan: TurnPlan, c: int, turn: int, target: int
) -> None:
    """Re-vend a drifting turn's pad: a fresh span with some slack, then the prefix length whose
    re-tokenized turn total is exact (seams on tokenizers without clean pre-token boundaries)."""
    drift = plan.counts["total"] - target
    want = max(0, (plan.pad.tokens if plan.pad else 0) - drift)
    reserve = vend(c, turn, want + REPAIR_SLACK)
    lengths = [want + d for k in range(REPAIR_SLACK + 1) for d in ((k,) if k == 0 else (-k, k))]
    lengths = [n for n in lengths if 0 <= n <= reserve.tokens]
    pads = [tok.decode(reserve.ids[:n]) if reserve.ids is not None else "" for n in lengths]
    if turn == 1:
        fixed = plan.counts["user"]
        totals = [fixed + n for n in tok.count(pads)]
    else:
        totals = tok.count([plan.real.text + pad for pad in pads])
    best = next((i for i, total in enumerate(totals) if total == target), 0)
    n = lengths[best]
    ids = reserve.ids[:n] if reserve.ids is not None else None
    joins = reserve.joins[reserve.joins < n] if reserve.joins is not None else None
    plan.pad = PadPiece(pads[best], n, reserve.kind, reserve.start, ids, joins)
    plan.repairs += 1


class TurnChecker:
    """Counts every turn by re-tokenizing it (pad spans shrunk to windows where exact)."""

    def __init__(self, tok: TokenizerHandle, recipe: Recipe, plans: list[list[TurnPlan]]):
        self.tok = tok
        self.plans = plans
        self.F, self.S = recipe.first_turn_length, recipe.subsequent_turn_length
        self.tolerance = recipe.tolerance
        self.full_check = recipe.verify == "full" or not tok.splits_locally
        self.mode = "full" if self.full_check else "windows"
        if recipe.verify == "windows" and not tok.splits_locally:
            self.mode = "full (the tokenizer has no local pre-tokenizer split)"
        n_turns = recipe.num_turns
        self.flat = [(c, turn) for c in range(len(plans)) for turn in range(1, n_turns + 1)]
        self.initial_drifting = 0

    def target(self, turn: int) -> int:
        return self.F if turn == 1 else self.S

    def _pad_text_for_count(self, plan: TurnPlan) -> tuple[str, int]:
        pad = plan.pad
        if pad is None or not pad.tokens:
            return "", 0
        windowed = None
        if not self.full_check and pad.ids is not None:
            windowed = self.tok.windowed(pad.ids, pad.joins)
        return windowed if windowed is not None else (pad.text, 0)

    def measure(self, keys: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Count the turns `keys`; return those off target."""
        batch: list[str] = []
        removed: list[int] = []
        for c, turn in keys:
            plan = self.plans[c][turn - 1]
            pad_text, pad_removed = self._pad_text_for_count(plan)
            if turn == 1:
                batch += [pad_text, plan.real.text]
                removed += [pad_removed, 0]
            else:
                batch.append(plan.real.text + pad_text)
                removed.append(pad_removed)
        counts = iter([n + r for n, r in zip(self.tok.count(batch), removed, strict=True)])
        drifting = []
        for c, turn in keys:
            plan = self.plans[c][turn - 1]
            if turn == 1:
                system, user = next(counts), next(counts)
                plan.counts = {"system": system, "user": user}
                total = system + user
            else:
                total = next(counts)
                plan.counts = {"real": plan.real.tokens, "pad": plan.pad.tokens if plan.pad else 0}
            plan.counts["total"] = total
            if total != self.target(turn):
                if plan.repairs == 0:
                    plan.first_drift = total - self.target(turn)
                drifting.append((c, turn))
        return drifting

    def run(self, vend: Vend) -> None:
        """Measure all turns, repair drifting ones, and fail beyond the tolerance."""
        drifting = self.measure(self.flat)
        self.initial_drifting = len(drifting)
        for _attempt in range(MAX_REPAIRS):
            if not drifting:
                break
            for c, turn in drifting:
                _repair(self.tok, vend, self.plans[c][turn - 1], c, turn, self.target(turn))
            drifting = self.measure(drifting)

    def drifts(self) -> list[int]:
        return [
            self.plans[c][turn - 1].counts["total"] - self.target(turn) for c, turn in self.flat
        ]

    def raise_beyond_tolerance(self) -> None:
        worst = [
            f"conversation {c} turn {turn}: {self.plans[c][turn - 1].counts['total']} tokens "
            f"({drift:+d})"
            for (c, turn), drift in zip(self.flat, self.drifts(), strict=True)
            if abs(drift) > self.tolerance
        ]
        if worst:
            raise DatasetError(
                f"{len(worst)} turns miss their token target beyond tolerance {self.tolerance} "
                f"after re-tokenization (nothing written): " + "; ".join(worst[:5])
            )

    def summary(self) -> dict[str, Any]:
        drifts = self.drifts()
        return {
            "tolerance": self.tolerance,
            "verify": self.mode,
            "turns": len(self.flat),
            "exact_turns": sum(1 for d in drifts if d == 0),
            "drifting_before_repair": self.initial_drifting,
            "max_abs_drift": max((abs(d) for d in drifts), default=0),
        }
