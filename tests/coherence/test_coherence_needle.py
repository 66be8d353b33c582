"""Long-context probe: construction against the resident capacity (real tiny tokenizer) and
grading. Only construction and grading are meaningful on CPU; a pass needs a GPU arm."""

from __future__ import annotations

import math

import pytest
from tokenizers import Tokenizer

from harness.coherence.needle import grade_needle, plan_needle
from harness.errors import ConfigError
from harness.serve.profiles import LongContextSpec
from harness.serve.tiny import ensure_tokenizer


@pytest.fixture(scope="module")
def count():
    tok = Tokenizer.from_file(str(ensure_tokenizer() / "tokenizer.json"))
    return lambda text: len(tok.encode(text, add_special_tokens=False).ids)


def test_context_length_depth_and_fillers_follow_the_spec(count) -> None:
    spec = LongContextSpec(resident_tokens=6000, context_tokens=2000, depth=0.75, overcommit=1.5)
    plan = plan_needle(spec, count, max_model_len=4096)
    # measured with the tokenizer, at most one haystack line short of the target
    assert 1900 <= plan.context_tokens <= 2000
    assert count(plan.context) == plan.context_tokens
    assert abs(plan.depth - 0.75) < 0.03
    needle_at = plan.context.index(plan.secret)
    assert abs(count(plan.context[:needle_at]) / plan.context_tokens - 0.75) < 0.03
    # enough fillers that needle + fillers exceed overcommit x resident, and no more
    assert plan.total_tokens >= 1.5 * 6000
    assert plan.total_tokens - plan.filler_tokens < 1.5 * 6000
    assert len(plan.fillers) == math.ceil((9000 - plan.context_tokens) / plan.filler_tokens)
    # no filler shares a prefix with another or with the needle (no prefix-cache shortcut)
    heads = {text[:12] for text in plan.fillers} | {plan.context[:12]}
    assert len(heads) == len(plan.fillers) + 1
    assert plan.prompt.startswith(plan.context) and plan.prompt.endswith("Answer:")
    assert all(plan.secret not in f for f in plan.fillers)


def test_no_fillers_when_the_context_alone_exceeds_residency(count) -> None:
    spec = LongContextSpec(resident_tokens=1000, context_tokens=3000, overcommit=1.25)
    plan = plan_needle(spec, count, max_model_len=4096)
    assert plan.fillers == [] and plan.total_tokens == plan.context_tokens


def test_impossible_plans_are_config_errors(count) -> None:
    too_long = LongContextSpec(resident_tokens=1000, context_tokens=4090)
    with pytest.raises(ConfigError, match="exceeds max-model-len 4096"):
        plan_needle(too_long, count, max_model_len=4096)
    too_many = LongContextSpec(resident_tokens=100000, context_tokens=1000, max_fillers=8)
    with pytest.raises(ConfigError, match="more than max_fillers 8"):
        plan_needle(too_many, count, max_model_len=4096)


def test_grading_needs_recall_and_evidence_of_spill(count) -> None:
    spec = LongContextSpec(resident_tokens=3000, context_tokens=1000)
    plan = plan_needle(spec, count, max_model_len=4096)
    spilled = {"offload_store_bytes": 4096.0, "preemptions": 0.0}
    ok = grade_needle(f"The code is {plan.secret}.", plan, spilled)
    assert ok.status == "pass" and "offload_store_bytes +4096" in ok.reason
    wrong = grade_needle("The code is 12345678.", plan, spilled)
    assert wrong.status == "fail" and "not recalled after KV left the GPU" in wrong.reason
    resident = grade_needle(plan.secret, plan, {"offload_store_bytes": 0.0})
    assert resident.status == "unjudged" and "proves nothing (recalled)" in resident.reason
