"""Re-tokenize a built swe_smith JSON: exact per-turn counts, drift and templated lengths."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.dataset.tok import TokenizerHandle
from harness.errors import DatasetError


def load_swe_smith(path: Path) -> dict[str, Any]:
    path = Path(path).expanduser()
    if not path.is_file():
        raise DatasetError(f"dataset file {path} does not exist")
    try:
        data = json.loads(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("conversations"), list):
        raise DatasetError(f"{path}: not a swe_smith dataset (no 'conversations' list)")
    for c, conversation in enumerate(data["conversations"]):
        if not isinstance(conversation, list) or not conversation:
            raise DatasetError(f"{path}: conversation {c} is not a non-empty list of turns")
        for t, turn in enumerate(conversation, 1):
            messages = turn.get("messages") if isinstance(turn, dict) else None
            if not isinstance(messages, list) or not all(
                isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages
            ):
                raise DatasetError(f"{path}: conversation {c} turn {t} has no valid 'messages'")
    return data


def _targets(
    meta: dict[str, Any], first_turn_length: int | None, subsequent_turn_length: int | None
) -> tuple[int | None, int | None]:
    F = first_turn_length if first_turn_length is not None else meta.get("first_turn_length")
    S = (
        subsequent_turn_length
        if subsequent_turn_length is not None
        else meta.get("subsequent_turn_length")
    )
    return F, S


def _count_turns(
    conversations: list[list[dict[str, Any]]], tok: TokenizerHandle, F: int | None, S: int | None
) -> tuple[list[dict[str, Any]], list[tuple[list[dict[str, Any]], list[Any]]]]:
    """Per-conversation turn records (bare counts, drift) and every turn's message history
    (empty assistant replies between turns) with the ids of each message."""
    contents = [m["content"] for conv in conversations for turn in conv for m in turn["messages"]]
    encoded = iter(tok.encode(contents))
    histories: list[tuple[list[dict[str, Any]], list[Any]]] = []
    report_convs = []
    for c, conv in enumerate(conversations):
        messages: list[dict[str, Any]] = []
        ids: list[Any] = []
        turns = []
        for t, turn in enumerate(conv, 1):
            if t > 1:
                messages = [*messages, {"role": "assistant", "content": ""}]
                ids = [*ids, None]
            turn_ids = [next(encoded) for _ in turn["messages"]]
            messages = messages + list(turn["messages"])
            ids = ids + turn_ids
            histories.append((messages, ids))
            per_message = [len(x) for x in turn_ids]
            bare = sum(per_message)
            target = F if t == 1 else S
            turns.append(
                {
                    "turn": t,
                    "roles": [m.get("role") for m in turn["messages"]],
                    "message_tokens": per_message,
                    "bare_tokens": bare,
                    "target": target,
                    "drift": None if target is None else bare - target,
                    "prompt_tokens_field": turn.get("prompt_tokens"),
                }
            )
        report_convs.append({"index": c, "turns": turns})
    return report_convs, histories


def _full_template_check(
    tok: TokenizerHandle,
    conversations: list[list[dict[str, Any]]],
    histories: list[tuple[list[dict[str, Any]], list[Any]]],
    templated: list[int],
) -> dict[str, Any]:
    """Every first turn rendered in full, compared with its shrunk templated count."""
    offsets = [sum(len(conv) for conv in conversations[:c]) for c in range(len(conversations))]
    full = tok.templated_lengths([histories[o] for o in offsets], full=True)
    disagreements = [
        {"conversation": c, "shrunk": templated[offsets[c]], "full": value}
        for c, value in enumerate(full)
        if templated[offsets[c]] != value
    ]
    return {"checked": len(offsets), "disagreements": disagreements}


def checksum_problem(path: Path, sha: str | None = None) -> str | None:
    """Why the data file does not match the sha256 its sidecar manifest records, or None (also
    when there is no sidecar: a hand-made file has nothing to contradict)."""
    from harness.dataset.builder import manifest_path_for
    from harness.dataset.sources import sha256_file

    sidecar = manifest_path_for(path)
    if not sidecar.is_file():
        return None
    try:
        recorded = json.loads(sidecar.read_text(encoding="utf-8")).get("output", {}).get("sha256")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError) as exc:
        return f"{sidecar}: unreadable ({exc})"
    actual = sha or sha256_file(path)
    if recorded and recorded != actual:
        return (
            f"{path}: sha256 {actual[:12]} does not match {recorded[:12]} recorded in "
            f"{sidecar.name} (a build was interrupted or the file was edited: rebuild it)"
        )
    return None


def verify_file(
    path: Path,
    tok: TokenizerHandle,
    *,
    first_turn_length: int | None = None,
    subsequent_turn_length: int | None = None,
    output_tokens_estimate: int = 220,
    full_template: bool = False,
) -> dict[str, Any]:
    """Per conversation and turn: bare tokens per message and per turn, drift from the targets
    (from the file's metadata unless given), and the templated prompt length (empty assistant
    replies, + output_tokens_estimate per earlier reply). Long contents are shrunk for the
    template count (exact, see TokenizerHandle.shrink); `full_template` also renders every
    first turn in full and reports any disagreement. ``checksum`` is why the file does not
    match the sha256 its sidecar records (None when it does): `repro dataset verify` fails on
    it after the counts, which still say how far the data is off."""
    checksum = checksum_problem(path)
    data = load_swe_smith(path)
    F, S = _targets(data.get("metadata") or {}, first_turn_length, subsequent_turn_length)
    conversations = data["conversations"]
    report_convs, histories = _count_turns(conversations, tok, F, S)
    templated = tok.templated_lengths(histories)
    check = (
        _full_template_check(tok, conversations, histories, templated) if full_template else None
    )
    turns = [turn for conv in report_convs for turn in conv["turns"]]
    for turn, value in zip(turns, templated, strict=True):
        turn["templated_prompt_tokens"] = value + (turn["turn"] - 1) * output_tokens_estimate
    first_ok = sum(
        1
        for conv in report_convs
        if conv["turns"][0]["prompt_tokens_field"] == conv["turns"][0]["templated_prompt_tokens"]
    )
    drifts = [abs(turn["drift"]) for turn in turns if turn["drift"] is not None]
    return {
        "path": str(path),
        "tokenizer": tok.identity(),
        "targets": {"first_turn_length": F, "subsequent_turn_length": S},
        "conversations": len(conversations),
        "turns": len(turns),
        "exact_turns": sum(1 for turn in turns if turn["drift"] == 0),
        "max_abs_drift": max(drifts, default=0),
        "prompt_tokens_turn1_match": first_ok,
        "template_full_check": check,
        "per_conversation": report_convs,
        "checksum": checksum,
    }


def summary_lines(report: dict[str, Any], *, per_turn: bool = False) -> list[str]:
    """Human-readable lines for `repro dataset verify`."""
    lines = [
        (
            f"{report['path']}: {report['conversations']} conversations, {report['turns']} "
            f"turns; targets F={report['targets']['first_turn_length']} "
            f"S={report['targets']['subsequent_turn_length']}"
        ),
        (
            f"exact turns: {report['exact_turns']}/{report['turns']}; max |drift| "
            f"{report['max_abs_drift']}; turn-1 prompt_tokens match the template: "
            f"{report['prompt_tokens_turn1_match']}/{report['conversations']}"
        ),
    ]
    if report.get("checksum"):
        lines.append(f"checksum: {report['checksum']}")
    check = report.get("template_full_check")
    if check is not None:
        lines.append(
            f"full-render template check: {check['checked']} first turns, "
            f"{len(check['disagreements'])} disagreements"
        )
    convs = report["per_conversation"]
    if convs:
        n_turns = max(len(c["turns"]) for c in convs)
        lines.append("turn  bare(min/max)    drift(min/max)  templated prompt(min/mean/max)")
        for t in range(n_turns):
            rows = [c["turns"][t] for c in convs if len(c["turns"]) > t]
            bare = [r["bare_tokens"] for r in rows]
            drift = [r["drift"] for r in rows if r["drift"] is not None] or [0]
            tmpl = [r["templated_prompt_tokens"] for r in rows]
            lines.append(
                f"{t + 1:>4}  {min(bare):>6}/{max(bare):<8} {min(drift):>+5}/{max(drift):<+8} "
                f"{min(tmpl)}/{sum(tmpl) / len(tmpl):.1f}/{max(tmpl)}"
            )
    if per_turn:
        for conv in convs:
            for turn in conv["turns"]:
                lines.append(
                    f"conv {conv['index']:>4} turn {turn['turn']:>3}: {turn['message_tokens']} "
                    f"= {turn['bare_tokens']} (drift {turn['drift']}), templated "
                    f"{turn['templated_prompt_tokens']}"
                )
    return lines
