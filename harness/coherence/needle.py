"""The long-context probe: a needle deep in a context, recalled after KV had to leave the GPU.

Construction: a haystack of numbered records sized (by the server's tokenizer) to the spec's
context length, a secret placed at `depth`, and enough concurrent filler requests that needle +
fillers exceed `overcommit` x the arm's GPU-resident KV capacity. Run: prime the needle context
(prefill, max_tokens 1), start the fillers, then ask for the needle with the same context as
prefix while the fillers are in flight, so its pages must come back from wherever they went.
Grading: the secret must be in the reply, and KV must demonstrably have left the GPU (offload
stores, HiSparse host->device traffic or preemptions); otherwise the resident fast path answered
and the probe proves nothing ("unjudged"). On CPU with tiny random models only the construction
and the grading mean anything; a pass is only meaningful on a GPU arm.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from harness.coherence.client import SPILL_COUNTERS, complete, read_counters, session
from harness.coherence.grade import Check
from harness.coherence.probes import ProbeSet
from harness.errors import ConfigError
from harness.serve.profiles import LongContextSpec

CountTokens = Callable[[str], int]
QUESTION = (
    "\nQuestion: what is the access code of the vault mentioned in the records above? "
    "Answer with the code only.\nAnswer:"
)
_WORDS = ("amber", "basalt", "cedar", "delta", "ember", "fjord", "granite", "harbor", "indigo")


@dataclass(frozen=True)
class NeedlePlan:
    secret: str
    context: str  # haystack with the needle, no question (the priming request)
    prompt: str  # context + question
    context_tokens: int  # measured
    needle_offset_tokens: int  # measured tokens before the needle
    fillers: list[str]
    filler_tokens: int  # measured, per filler
    resident_tokens: int
    answer_tokens: int

    @property
    def depth(self) -> float:
        return self.needle_offset_tokens / max(self.context_tokens, 1)

    @property
    def total_tokens(self) -> int:
        return self.context_tokens + len(self.fillers) * self.filler_tokens


def _line(tag: str, i: int) -> str:
    word = _WORDS[(i * 7) % len(_WORDS)]
    return f"{tag} record {i:06d}: crate {word} moved from bay {(i * 37) % 101} to dock {i % 13}.\n"


def _sized_text(tag: str, target: int, count: CountTokens) -> tuple[list[str], int]:
    """Lines whose joined token count is <= target and close to it (measured, not assumed)."""
    sample = [_line(tag, i) for i in range(64)]
    per_line = max(count("".join(sample)) / len(sample), 1.0)
    n = max(int(target / per_line), 1)
    for _ in range(4):
        lines = [_line(tag, i) for i in range(n)]
        measured = count("".join(lines))
        if measured <= target and target - measured <= 2 * per_line:
            return lines, measured
        n = max(n + int((target - measured) / per_line) - (1 if measured > target else 0), 1)
    lines = [_line(tag, i) for i in range(n)]
    return lines, count("".join(lines))


def plan_needle(
    spec: LongContextSpec, count: CountTokens, *, max_model_len: int | None, seed: int = 0
) -> NeedlePlan:
    """Build the needle prompt and the fillers; raises ConfigError if no pressure is possible."""
    question_tokens = count(QUESTION)
    budget = spec.context_tokens
    if max_model_len is not None and budget + question_tokens + spec.answer_tokens > max_model_len:
        raise ConfigError(
            f"coherence.long_context.context_tokens {budget} + question {question_tokens} + "
            f"answer {spec.answer_tokens} exceeds max-model-len {max_model_len}"
        )
    secret = f"{random.Random(seed).randrange(10**7, 10**8)}"
    needle = f"Vault note: the access code of the vault is {secret}.\n"
    lines, _ = _sized_text("Main", budget - count(needle), count)
    at = min(round(spec.depth * len(lines)), len(lines))
    before = "".join(lines[:at])
    context = before + needle + "".join(lines[at:])
    context_tokens = count(context)
    filler_target = spec.filler_tokens or spec.context_tokens
    if max_model_len is not None and filler_target + 16 > max_model_len:
        raise ConfigError(
            f"coherence.long_context.filler_tokens {filler_target} exceeds max-model-len "
            f"{max_model_len}"
        )
    needed = spec.overcommit * spec.resident_tokens - context_tokens
    fillers: list[str] = []
    filler_tokens = 0
    if needed > 0:
        first, filler_tokens = _sized_text("Filler 000", filler_target, count)
        n = math.ceil(needed / filler_tokens)
        if n > spec.max_fillers:
            raise ConfigError(
                f"coherence.long_context: {n} fillers of {filler_tokens} tokens are needed to "
                f"exceed {spec.overcommit} x resident_tokens {spec.resident_tokens}, more than "
                f"max_fillers {spec.max_fillers}"
            )
        # same lines and width per filler; a distinct tag so no prefix is shared or cached
        fillers = ["".join(first).replace("Filler 000 ", f"Filler {k:03d} ") for k in range(n)]
    return NeedlePlan(
        secret=secret,
        context=context,
        prompt=context + QUESTION,
        context_tokens=context_tokens,
        needle_offset_tokens=count(before) if before else 0,
        fillers=fillers,
        filler_tokens=filler_tokens,
        resident_tokens=spec.resident_tokens,
        answer_tokens=spec.answer_tokens,
    )


def grade_needle(reply_text: str, plan: NeedlePlan, spill: dict[str, float]) -> Check:
    found = plan.secret in reply_text
    spilled = {k: v for k, v in spill.items() if v > 0}
    where = f"depth {plan.depth:.0%} of {plan.context_tokens} tokens"
    details = {
        "secret": plan.secret,
        "recalled": found,
        "context_tokens": plan.context_tokens,
        "depth": round(plan.depth, 4),
        "fillers": len(plan.fillers),
        "filler_tokens": plan.filler_tokens,
        "total_tokens": plan.total_tokens,
        "resident_tokens": plan.resident_tokens,
        "spill": spill,
        "reply": reply_text[:200],
    }
    if not spilled:
        return Check(
            status="unjudged",
            reason=f"needle at {where}: no KV left the GPU during the probe (no offload, "
            f"HiSparse or preemption counter moved), so it proves nothing "
            f"({'recalled' if found else 'not recalled'})",
            details=details,
        )
    evidence = ", ".join(f"{k} +{v:.0f}" for k, v in spilled.items())
    if found:
        return Check(
            status="pass", reason=f"needle at {where} recalled ({evidence})", details=details
        )
    return Check(
        status="fail",
        reason=f"needle at {where} not recalled after KV left the GPU ({evidence})",
        details=details,
    )


def run_needle(
    base_url: str, probe_set: ProbeSet, model: str, plan: NeedlePlan, *, timeout_s: float
) -> Check:
    """Prime, flood with fillers, ask; the counters' deltas over the window are the evidence."""
    names = [n for group in SPILL_COUNTERS.values() for n in group]
    before = read_counters(base_url, names)
    http = session()

    def ask(probe_id: str, prompt: str, max_tokens: int) -> str:
        reply = complete(
            session() if probe_id.startswith("filler") else http,
            base_url,
            probe_set,
            model,
            probe_id=probe_id,
            prompt=prompt,
            max_tokens=max_tokens,
            timeout_s=timeout_s,
        )
        return reply.text

    ask("needle-prime", plan.context, 1)
    with ThreadPoolExecutor(max_workers=max(len(plan.fillers), 1) + 1) as pool:
        fillers = [pool.submit(ask, f"filler-{k}", text, 16) for k, text in enumerate(plan.fillers)]
        answer = pool.submit(ask, "needle", plan.prompt, plan.answer_tokens)
        text = answer.result()
        for future in fillers:
            future.result()
    after = read_counters(base_url, names)
    spill = {
        key: sum(after.get(n, 0.0) - before.get(n, 0.0) for n in group)
        for key, group in SPILL_COUNTERS.items()
    }
    return grade_needle(text, plan, spill)
