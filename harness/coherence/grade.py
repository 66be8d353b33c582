"""Judging replies: agreement with a reference, garbage signatures, answers, MTP acceptance.

Every judge returns a `Check`: status pass/fail/unjudged, a one-line reason, and the numbers.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal, TypedDict

from pydantic import BaseModel, Field

from harness.coherence.client import Reply
from harness.serve.profiles import AcceptanceSpec, AgreementSpec, GarbageSpec

Status = Literal["pass", "fail", "unjudged"]
NGRAM = 4


class ProbeRow(TypedDict):
    """One probe's agreement with the reference (a row of `details["per_probe"]`)."""

    id: str
    prefix: int  # tokens equal from the start
    positional: float
    agrees: bool


class Check(BaseModel, extra="forbid"):
    status: Status
    reason: str
    details: dict[str, Any] = Field(default_factory=dict)


# --------------------------------------------------------------------------- agreement


def prefix_match(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def positional_agreement(a: Sequence[int], b: Sequence[int], tokens: int) -> float:
    """Share of the first `tokens` positions holding the same token; a missing token differs."""
    span = min(tokens, max(len(a), len(b)))
    if span == 0:
        return 1.0
    same = sum(1 for i in range(min(span, len(a), len(b))) if a[i] == b[i])
    return same / span


def probe_agrees(arm: Sequence[int], ref: Sequence[int], spec: AgreementSpec) -> bool:
    a, b = list(arm[: spec.tokens]), list(ref[: spec.tokens])
    prefix = prefix_match(a, b)
    return prefix >= min(spec.min_prefix, spec.tokens) or (prefix == len(a) == len(b))


def judge_agreement(
    replies: Sequence[Reply], reference: dict[str, Reply], spec: AgreementSpec, ref_name: str
) -> Check:
    """Prefix match and positional agreement over the first N tokens, probe by probe."""
    missing = [r.id for r in replies if r.id not in reference]
    if missing:
        return Check(
            status="unjudged",
            reason=f"reference {ref_name} has no reply for probes {', '.join(missing)}",
        )
    rows: list[ProbeRow] = []
    for reply in replies:
        ref = reference[reply.id].token_ids
        rows.append(
            ProbeRow(
                id=reply.id,
                prefix=prefix_match(reply.token_ids[: spec.tokens], ref[: spec.tokens]),
                positional=round(positional_agreement(reply.token_ids, ref, spec.tokens), 4),
                agrees=probe_agrees(reply.token_ids, ref, spec),
            )
        )
    agreeing = sum(r["agrees"] for r in rows)
    total = len(rows)
    positional = statistics.fmean(r["positional"] for r in rows)
    min_prefix = min(r["prefix"] for r in rows)
    details = {
        "tokens": spec.tokens,
        "agreeing": agreeing,
        "probes": total,
        "mean_positional": round(positional, 4),
        "min_prefix": min_prefix,
        "per_probe": rows,
    }
    bad = [r for r in rows if not r["agrees"]]
    ok = agreeing / total >= spec.min_agreeing and positional >= spec.min_positional
    if ok:
        return Check(
            status="pass",
            reason=f"agrees with {ref_name} on {agreeing}/{total} probes over the first "
            f"{spec.tokens} tokens (positional {positional:.2f})",
            details=details,
        )
    after = int(statistics.median(r["prefix"] for r in bad)) if bad else min_prefix
    return Check(
        status="fail",
        reason=f"outputs disagree with {ref_name} after {after} tokens on "
        f"{len(bad)}/{total} prompts (positional agreement {positional:.2f})",
        details=details,
    )


# --------------------------------------------------------------------------- garbage


def repetition(tokens: Sequence[int], n: int = NGRAM) -> float:
    """Share of n-grams that repeat an earlier n-gram (0 = none, -> 1 = one loop)."""
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return 0.0 if not grams else 1.0 - len(set(grams)) / len(grams)


def distinct(tokens: Sequence[int]) -> float:
    return 1.0 if not tokens else len(set(tokens)) / len(tokens)


def signatures(reply: Reply) -> dict[str, Any]:
    counts = Counter(reply.token_ids)
    top = counts.most_common(1)[0][1] / len(reply.token_ids) if reply.token_ids else 0.0
    return {
        "id": reply.id,
        "tokens": len(reply.token_ids),
        "repetition": round(repetition(reply.token_ids), 4),
        "distinct": round(distinct(reply.token_ids), 4),
        "top_token_share": round(top, 4),
        "replacement_chars": reply.text.count("\ufffd"),
        "empty": not reply.token_ids,
    }


def _garbage_problems(sig: dict[str, Any], spec: GarbageSpec) -> list[str]:
    problems = []
    if sig["empty"]:
        problems.append("empty reply")
    if sig["repetition"] > spec.max_repetition:
        problems.append(f"repetition {sig['repetition']:.2f} > {spec.max_repetition}")
    if sig["distinct"] < spec.min_distinct:
        problems.append(f"distinct tokens {sig['distinct']:.2f} < {spec.min_distinct}")
    if sig["replacement_chars"] > spec.max_replacement:
        problems.append(f"{sig['replacement_chars']} U+FFFD characters")
    return problems


def judge_garbage(replies: Sequence[Reply], spec: GarbageSpec) -> Check:
    rows = [signatures(r) for r in replies]
    flagged = {row["id"]: _garbage_problems(row, spec) for row in rows}
    flagged = {k: v for k, v in flagged.items() if v}
    details = {"enforced": spec.enforce, "flagged": flagged, "per_probe": rows}
    if not flagged:
        return Check(status="pass", reason="no garbage signature", details=details)
    first_id, first = next(iter(flagged.items()))
    summary = f"garbage on {len(flagged)}/{len(rows)} prompts ({first_id}: {first[0]})"
    if not spec.enforce:
        return Check(status="pass", reason=f"{summary}; reported only", details=details)
    return Check(status="fail", reason=summary, details=details)


# --------------------------------------------------------------------------- answers


def judge_answers(replies: Sequence[Reply], expects: dict[str, list[str]], minimum: float) -> Check:
    graded = {r.id: any(e in r.text for e in expects[r.id]) for r in replies if expects.get(r.id)}
    if not graded:
        return Check(status="pass", reason="probe set has no checkable answers", details={})
    right = sum(graded.values())
    details = {"answered": right, "checkable": len(graded), "per_probe": graded}
    share = right / len(graded)
    status: Status = "pass" if share >= minimum else "fail"
    word = "answered" if status == "pass" else "only answered"
    return Check(
        status=status,
        reason=f"{word} {right}/{len(graded)} checkable probes (need {minimum:.0%})",
        details=details,
    )


# --------------------------------------------------------------------------- acceptance


def judge_acceptance(
    before: dict[str, float], after: dict[str, float], spec: AcceptanceSpec | None, names: dict
) -> Check:
    """Acceptance length 1 + delta accepted / delta drafts over the probe window."""
    if spec is None:
        return Check(status="pass", reason="no acceptance band (no speculative decoding)")
    if names["drafts"] not in after:
        return Check(
            status="unjudged",
            reason="acceptance band set but the server exports no spec-decode counters",
        )
    delta = {k: after.get(v, 0.0) - before.get(v, 0.0) for k, v in names.items()}
    if min(delta.values()) < 0:
        return Check(status="unjudged", reason="spec-decode counters went backwards (restart)")
    if delta["drafts"] <= 0:
        return Check(status="unjudged", reason="no drafts were made during the probes")
    length = 1.0 + delta["accepted"] / delta["drafts"]
    rate = delta["accepted"] / delta["draft_tokens"] if delta["draft_tokens"] else None
    details = {"acceptance_length": round(length, 4), "acceptance_rate": rate, **delta}
    band = f"[{spec.min}, {spec.max if spec.max is not None else 'inf'}]"
    if length < spec.min or (spec.max is not None and length > spec.max):
        return Check(
            status="fail",
            reason=f"MTP acceptance length {length:.2f} outside its band {band} "
            f"({delta['accepted']:.0f} accepted of {delta['draft_tokens']:.0f} draft tokens)",
            details=details,
        )
    return Check(
        status="pass", reason=f"acceptance length {length:.2f} within {band}", details=details
    )
