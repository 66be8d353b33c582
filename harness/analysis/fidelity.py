"""Workload fidelity of one point: did the client replay the conversations it was meant to?

From EvalScope's own request log (the sqlite's request bodies and usage), per conversation and
turn: the server's prompt tokens P_t should grow by at least the previous reply,
P_t >= P_{t-1} + C_{t-1} (previous prompt + reply + new turn + chat template).  The residual
r_t = P_t - P_{t-1} - C_{t-1} is the new turn plus template tokens; it is reported, and compared
with the dataset's subsequent-turn length when the dataset manifest gives one.  Replayed
assistant messages that are empty are counted: the pinned client drops vLLM's `delta.reasoning`,
so a reasoning-parser server makes it replay empty assistant turns (docs/pitfalls.md).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections import defaultdict
from typing import Any

# Re-tokenising a reply inside the chat template can shift a few tokens at the boundaries.
_SLACK_TOKENS = 4


def _conversation_key(messages: list[dict[str, Any]]) -> str:
    # The first user message identifies a conversation (system pads may be shared).
    first = next((m for m in messages if m.get("role") == "user"), messages[0] if messages else {})
    return hashlib.sha1(json.dumps(first, sort_keys=True).encode()).hexdigest()[:16]


def check_fidelity(
    rows: list[dict[str, Any]],
    *,
    expected_turn_tokens: int | None = None,
) -> dict[str, Any]:
    """rows: {"request": body, "prompt_tokens", "completion_tokens", "success"} in start order."""
    turns: dict[str, list[tuple[int, int | None, int | None]]] = defaultdict(list)
    empty_assistant = 0
    assistant_total = 0
    for row in rows:
        messages = row.get("request", {}).get("messages") or []
        if not messages:
            continue
        assistants = [m for m in messages if m.get("role") == "assistant"]
        assistant_total += len(assistants)
        empty_assistant += sum(1 for m in assistants if not str(m.get("content") or "").strip())
        user_turns = sum(1 for m in messages if m.get("role") == "user")
        turns[_conversation_key(messages)].append(
            (user_turns, row.get("prompt_tokens"), row.get("completion_tokens"))
        )

    residuals: list[int] = []
    short_growth = 0
    for items in turns.values():
        items.sort(key=lambda item: item[0])
        for (t0, p0, c0), (t1, p1, _) in itertools.pairwise(items):
            if t1 != t0 + 1 or p0 is None or c0 is None or p1 is None:
                continue
            residual = p1 - p0 - c0
            residuals.append(residual)
            if residual < -_SLACK_TOKENS:
                short_growth += 1

    result: dict[str, Any] = {
        "conversations_seen": len(turns),
        "turn_pairs_checked": len(residuals),
        "replayed_assistant_messages": assistant_total,
        "empty_assistant_messages": empty_assistant,
        "short_growth_turns": short_growth,
        "turn_residual_tokens": (
            {"min": min(residuals), "mean": sum(residuals) / len(residuals), "max": max(residuals)}
            if residuals
            else None
        ),
        "expected_turn_tokens": expected_turn_tokens,
    }
    warnings: list[str] = []
    if empty_assistant:
        warnings.append(
            f"{empty_assistant} of {assistant_total} replayed assistant turns were empty "
            "(server streams delta.reasoning? the pinned client drops it)"
        )
    if short_growth:
        warnings.append(f"{short_growth} turns grew by less than the previous reply")
    if residuals and expected_turn_tokens:
        mean = sum(residuals) / len(residuals)
        if mean < expected_turn_tokens - _SLACK_TOKENS:
            warnings.append(
                f"mean new-turn growth {mean:.0f} tokens < the dataset's "
                f"{expected_turn_tokens}-token subsequent turns"
            )
    result["warnings"] = warnings
    result["ok"] = not warnings
    return result
