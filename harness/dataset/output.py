"""The builder's output: templated prompt lengths, the swe_smith JSON in the original's shape
(docs/recipe.md §6.7), and the per-turn records of the sidecar manifest."""

from __future__ import annotations

import fcntl
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from harness.dataset.exact import TurnPlan
from harness.dataset.recipe import Recipe
from harness.dataset.tok import TokenizerHandle
from harness.errors import DatasetError


def turn_messages(turn: int, plan: TurnPlan) -> list[dict[str, str]]:
    pad = plan.pad.text if plan.pad else ""
    if turn == 1:
        return [{"role": "system", "content": pad}, {"role": "user", "content": plan.real.text}]
    return [{"role": "user", "content": plan.real.text + pad}]


def _construction_ids(turn: int, plan: TurnPlan) -> list[np.ndarray | None]:
    """The ids each message was built from (used only to shrink long contents for the
    templated count, which is cross-checked against a full render)."""
    pad_ids = plan.pad.ids if plan.pad is not None and plan.pad.ids is not None else None
    if turn == 1:
        return [pad_ids if plan.pad and plan.pad.tokens else None, plan.real.ids]
    if pad_ids is None or not plan.pad or plan.pad.tokens == 0:
        return [plan.real.ids]
    return [np.concatenate([plan.real.ids, pad_ids])]


def templated_lengths(tok: TokenizerHandle, plans: list[list[TurnPlan]]) -> tuple[list[int], str]:
    """Every turn's templated prompt length with empty assistant replies, and the method used:
    long contents shrunk, cross-checked on the first turn against a full render."""
    histories: list[tuple[list[dict[str, Any]], list[np.ndarray | None]]] = []
    for conv in plans:
        messages: list[dict[str, Any]] = []
        ids_so_far: list[np.ndarray | None] = []
        for turn, plan in enumerate(conv, start=1):
            if turn > 1:
                messages = [*messages, {"role": "assistant", "content": ""}]
                ids_so_far = [*ids_so_far, None]
            messages = messages + turn_messages(turn, plan)
            ids_so_far = ids_so_far + _construction_ids(turn, plan)
            histories.append((messages, ids_so_far))
    templated = tok.templated_lengths(histories, window=8)
    method = "shrunk"
    if plans:  # cross-check the shrinking shortcut on the first conversation's first turn
        full = tok.templated_lengths([histories[0]], full=True)[0]
        if full != templated[0]:
            method = f"full (shrunk gave {templated[0]}, full {full} on conversation 0 turn 1)"
            templated = tok.templated_lengths(histories, full=True)
    return templated, method


def _turn_record(turn: int, plan: TurnPlan, templated: int, osl: int) -> dict[str, Any]:
    return {
        "turn": turn,
        **plan.counts,
        "real_tokens": plan.real.real_tokens,
        "real_truncated": plan.real.truncated,
        "pad_tokens": plan.pad.tokens if plan.pad else 0,
        "pad_kind": plan.pad.kind if plan.pad else "none",
        "pad_pool_start": plan.pad.start if plan.pad else None,
        "seam_drift_before_repair": plan.first_drift,
        "repairs": plan.repairs,
        "templated_prompt_tokens": templated + (turn - 1) * osl,
    }


def render(
    recipe: Recipe, plans: list[list[TurnPlan]], templated: list[int]
) -> tuple[bytes, list[dict[str, Any]]]:
    """(the output file's bytes, the manifest's per-conversation records)."""
    S, N, osl = recipe.subsequent_turn_length, recipe.num_turns, recipe.output_tokens_estimate
    out_conversations = []
    per_conversation = []
    for c, conv in enumerate(plans):
        turns_out = []
        turn_records = []
        prompt_tokens = 0
        for turn, plan in enumerate(conv, start=1):
            prompt_tokens = templated[c * N] if turn == 1 else prompt_tokens + S + osl
            turns_out.append(
                {"messages": turn_messages(turn, plan), "prompt_tokens": prompt_tokens}
            )
            turn_records.append(_turn_record(turn, plan, templated[c * N + turn - 1], osl))
        out_conversations.append(turns_out)
        per_conversation.append(
            {
                "index": c,
                "bare_tokens": sum(r["total"] for r in turn_records),
                "first_turn_templated": templated[c * N],
                "last_turn_templated": turn_records[-1]["templated_prompt_tokens"],
                "turns": turn_records,
            }
        )
    payload = json.dumps(
        {"metadata": metadata(recipe, len(out_conversations)), "conversations": out_conversations},
        indent=2,
        ensure_ascii=False,
    ).encode("utf-8")
    return payload, per_conversation


def metadata(recipe: Recipe, num_conversations: int) -> dict[str, Any]:
    return {
        "model_path": recipe.tokenizer,
        "dataset_name": recipe.trajectories,
        "split": recipe.split,
        "only_resolved": bool(recipe.only_resolved),
        "padded": True,
        "pad_source": recipe.pad_source,
        "pad_dataset_name": recipe.pad_text if recipe.pad_source == "openscience" else None,
        "first_turn_length": recipe.first_turn_length,
        "subsequent_turn_length": recipe.subsequent_turn_length,
        "num_turns": recipe.num_turns,
        "num_conversations": num_conversations,
    }


def stats(values: list[int]) -> dict[str, float]:
    if not values:
        return {}
    return {"min": min(values), "max": max(values), "mean": round(float(np.mean(values)), 2)}


# ------------------------------------------------------------------ one writer per output


@contextmanager
def output_lock(output: Path) -> Iterator[None]:
    """Hold ``<output>.lock`` for a whole build: a second build into the same --output-path
    fails at once, naming the path, instead of both exiting 0 and one silently replacing the
    other. The lock is the kernel's (flock), so a killed build never leaves it held."""
    lock_path = output.with_name(output.name + ".lock")
    with open(lock_path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DatasetError(
                f"{output}: another `repro dataset build` is writing it now; wait for it, or "
                "choose another --output-path"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
