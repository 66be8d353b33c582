"""Judges on crafted token sequences: agreement maths and reasons, garbage, answers, acceptance."""

from __future__ import annotations

import pytest

from harness.coherence.client import SPEC_COUNTERS, Reply, counter_totals
from harness.coherence.grade import (
    judge_acceptance,
    judge_agreement,
    judge_answers,
    judge_garbage,
    positional_agreement,
    prefix_match,
    repetition,
)
from harness.serve.profiles import AcceptanceSpec, AgreementSpec, GarbageSpec

EXACT = AgreementSpec(tokens=8, min_prefix=8, min_agreeing=1.0, min_positional=1.0)
LOOSE = AgreementSpec(tokens=8, min_prefix=4, min_agreeing=0.75, min_positional=0.5)


def reply(pid: str, tokens: list[int], text: str = "") -> Reply:
    return Reply(id=pid, token_ids=tokens, text=text)


def test_prefix_and_positional_agreement() -> None:
    assert prefix_match([1, 2, 3, 4], [1, 2, 9, 4]) == 2
    assert positional_agreement([1, 2, 3, 4], [1, 2, 9, 4], 4) == 0.75
    # a reply that stopped early differs at every missing position
    assert positional_agreement([1, 2], [1, 2, 3, 4], 4) == 0.5
    assert positional_agreement([1, 2, 3, 4, 5], [1, 2, 3, 4, 6], 4) == 1.0


def test_exact_agreement_passes_and_names_the_reference() -> None:
    ref = {f"p{i}": reply(f"p{i}", list(range(i, i + 8))) for i in range(4)}
    check = judge_agreement(list(ref.values()), ref, EXACT, "nomtp")
    assert check.status == "pass"
    assert check.details["agreeing"] == 4 and check.details["mean_positional"] == 1.0
    assert "agrees with nomtp on 4/4 probes" in check.reason


def test_disagreement_reason_gives_divergence_point_and_share() -> None:
    ref = {f"p{i}": reply(f"p{i}", [7] * 8) for i in range(8)}
    arm = [reply(f"p{i}", [7, 7, 7] + [1] * 5) for i in range(7)] + [reply("p7", [7] * 8)]
    check = judge_agreement(arm, ref, LOOSE, "offload512")
    assert check.status == "fail"
    assert check.reason.startswith("outputs disagree with offload512 after 3 tokens on 7/8 prompts")


def test_thresholds_tolerate_late_drift_but_not_early() -> None:
    ref = {f"p{i}": reply(f"p{i}", list(range(8))) for i in range(4)}
    late = [reply(f"p{i}", [0, 1, 2, 3, 4, 5, 9, 9]) for i in range(4)]
    assert judge_agreement(late, ref, LOOSE, "r").status == "pass"
    assert judge_agreement(late, ref, EXACT, "r").status == "fail"
    early = [reply(f"p{i}", [0, 9, 9, 9, 9, 9, 9, 9]) for i in range(4)]
    assert judge_agreement(early, ref, LOOSE, "r").status == "fail"


def test_same_early_stop_agrees_and_missing_reference_probe_is_unjudged() -> None:
    ref = {"a": reply("a", [1, 2])}
    assert judge_agreement([reply("a", [1, 2])], ref, EXACT, "r").status == "pass"
    assert judge_agreement([reply("a", [1])], ref, EXACT, "r").status == "fail"
    missing = judge_agreement([reply("b", [1, 2])], ref, EXACT, "r")
    assert missing.status == "unjudged" and "no reply for probes b" in missing.reason


def test_garbage_signatures() -> None:
    assert repetition([1, 2, 3, 4, 5, 6, 7, 8]) == 0.0
    assert repetition([5, 6] * 16) > 0.9
    spec = GarbageSpec()
    looping = reply("loop", [5, 6] * 16, "ab" * 16)
    fffd = reply("bytes", list(range(32)), "caf\ufffd\ufffd")
    fine = reply("ok", list(range(32)), "a perfectly ordinary reply")
    check = judge_garbage([looping, fffd, fine], spec)
    assert check.status == "fail"
    assert set(check.details["flagged"]) == {"loop", "bytes"}
    assert check.reason.startswith("garbage on 2/3 prompts (loop: repetition")
    reported = judge_garbage([looping], GarbageSpec(enforce=False))
    assert reported.status == "pass" and reported.reason.endswith("reported only")
    assert judge_garbage([reply("e", [])], spec).details["flagged"] == {"e": ["empty reply"]}


def test_answers_need_the_share_of_checkable_probes() -> None:
    replies = [reply("a", [1], "It is 391."), reply("b", [1], "Sydney"), reply("c", [1], "x")]
    expects = {"a": ["391"], "b": ["Canberra"], "c": []}
    assert judge_answers(replies, expects, 0.5).status == "pass"
    failed = judge_answers(replies, expects, 0.75)
    assert failed.status == "fail" and "1/2" in failed.reason


METRICS_TEXT = """\
# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="tiny"}} {drafts}
vllm:spec_decode_num_drafts_created{{engine="0",model_name="tiny"}} 1.7e9
# HELP vllm:spec_decode_num_draft_tokens Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="tiny"}} {draft_tokens}
# HELP vllm:spec_decode_num_accepted_tokens Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="tiny"}} {accepted}
vllm:spec_decode_num_accepted_tokens_total{{engine="1",model_name="tiny"}} {accepted}
"""


def counters(drafts: float, draft_tokens: float, accepted: float) -> dict[str, float]:
    text = METRICS_TEXT.format(drafts=drafts, draft_tokens=draft_tokens, accepted=accepted)
    return counter_totals(text, SPEC_COUNTERS.values())


def test_acceptance_band_from_counter_deltas_summed_over_engines() -> None:
    before = counters(10, 30, 5)  # accepted sums two engines: 10
    after = counters(110, 330, 105)  # +100 drafts, +200 accepted
    band = AcceptanceSpec(min=1.5, max=4.0)
    check = judge_acceptance(before, after, band, SPEC_COUNTERS)
    assert check.status == "pass"
    assert check.details["acceptance_length"] == pytest.approx(3.0)
    low = judge_acceptance(before, counters(110, 330, 6), band, SPEC_COUNTERS)
    assert low.status == "fail"
    assert low.reason.startswith("MTP acceptance length 1.02 outside its band [1.5, 4.0]")


def test_acceptance_cannot_be_judged_without_counters_or_drafts() -> None:
    band = AcceptanceSpec(min=1.5)
    assert judge_acceptance({}, {}, band, SPEC_COUNTERS).status == "unjudged"
    same = counters(10, 30, 5)
    assert "no drafts" in judge_acceptance(same, same, band, SPEC_COUNTERS).reason
    assert judge_acceptance({}, {}, None, SPEC_COUNTERS).status == "pass"
    with pytest.raises(ValueError):
        AcceptanceSpec(min=1.0)
