"""MTP acceptance drawn per draft, with a per-request spread (harness/sim/mtp.py,
docs/simulator.md §5b): the numbers are worked out in the comments."""

from __future__ import annotations

from statistics import mean

import pytest

from harness.sim.mtp import Mtp, per_draft_probability, unit_draw
from harness.sim.request import Request
from harness.sim.residency import GpuResidency
from harness.sim.scheduler import Scheduler


def test_per_draft_probability_solves_the_geometric_sum():
    # one draft: a = 1 + alpha -> alpha = a - 1
    assert per_draft_probability(1, 1.5) == pytest.approx(0.5, abs=1e-9)
    # three drafts, a = 1 + alpha + alpha^2 + alpha^3: 0 at a = 1, 1 at a = 4
    assert per_draft_probability(3, 1.0) == pytest.approx(0.0, abs=1e-9)
    assert per_draft_probability(3, 4.0) == pytest.approx(1.0, abs=1e-9)
    # alpha = 0.5: 1 + 0.5 + 0.25 + 0.125 = 1.875
    assert per_draft_probability(3, 1.875) == pytest.approx(0.5, abs=1e-9)


def test_unit_draws_are_reproducible_and_uniform():
    draws = [unit_draw(7, k) for k in range(20_000)]
    assert draws == [unit_draw(7, k) for k in range(20_000)]  # no state: same inputs, same draw
    assert draws[:50] != [unit_draw(8, k) for k in range(50)]  # another request, other draws
    assert all(0.0 <= u < 1.0 for u in draws)
    assert mean(draws) == pytest.approx(0.5, abs=0.01)
    assert sum(u < 0.25 for u in draws) / len(draws) == pytest.approx(0.25, abs=0.01)


def test_a_drawn_step_emits_the_accepted_prefix_plus_one():
    # spread 0: every request accepts each draft with alpha = 0.5 (a = 1.875), so a step emits
    # 1, 2, 3, 4 tokens with probability 0.5, 0.25, 0.125, 0.125 (P(emitted > j) = 0.5^j)
    m = Mtp(3, 1.875, spread=0.0)
    steps = [m.emitted(k, stream=3) for k in range(40_000)]
    assert set(steps) == {1, 2, 3, 4}
    shares = [steps.count(n) / len(steps) for n in (1, 2, 3, 4)]
    assert shares == pytest.approx([0.5, 0.25, 0.125, 0.125], abs=0.01)
    assert mean(steps) == pytest.approx(1.875, rel=0.01)
    # the step's draw decides: u < 0.5^j for j = 1..3 accepted drafts, plus the target's token
    for k in range(200):
        u = unit_draw(3, k)
        assert m.emitted(k, stream=3) == 1 + (u < 0.5) + (u < 0.25) + (u < 0.125)


def test_each_request_has_its_own_mean_within_the_spread():
    m = Mtp(3, 2.5, spread=0.2)
    own = [m.request_acceptance(s) for s in range(2_000)]
    assert min(own) >= 2.0 and max(own) <= 3.0  # 2.5 x (1 +- 0.2)
    assert min(own) < 2.05 and max(own) > 2.95  # and the whole range is drawn
    assert mean(own) == pytest.approx(2.5, abs=0.02)
    # a request's steps follow its own mean (here 5,000 steps of one request)
    slow = min(range(200), key=m.request_acceptance)
    steps = [m.emitted(k, stream=slow) for k in range(5_000)]
    assert mean(steps) == pytest.approx(m.request_acceptance(slow), rel=0.03)
    # clipped to [1, spec + 1]
    assert Mtp(3, 3.9, spread=0.4).request_acceptance(1) <= 4.0


def test_even_emission_is_unchanged_without_a_spread():
    m = Mtp(3, 2.5)
    assert [m.emitted(k, stream=s) for s in (0, 9) for k in range(4)] == [2, 3, 2, 3] * 2
    with pytest.raises(ValueError, match="spread"):
        Mtp(3, 2.5, spread=1.0)


def _finish_steps(mtp: Mtp) -> list[int]:
    """Two identical requests admitted together: the step at which each emits its 40th token."""
    s = Scheduler(GpuResidency(100, 16), max_num_seqs=4, max_num_batched_tokens=1000, mtp=mtp)
    reqs = [Request(rid, rid, 1, 32, 40, 0.0) for rid in (0, 1)]
    for r in reqs:
        s.add(r)
    done: dict[int, int] = {}
    step = 0
    while len(done) < 2:
        step += 1
        for r in s.update(s.schedule(float(step)), float(step)):
            done[r.rid] = step
        assert step < 200
    # spec-decode counters: 1 + accepted / drafts is the tokens per decode step
    c = s.counters
    decode_tokens = sum(r.out - 1 for r in reqs)  # the first token comes from the prefill
    assert 1 + c.accepted / c.drafts == pytest.approx(decode_tokens / c.drafts)
    return [done[0], done[1]]


def test_requests_that_start_together_drift_apart_only_when_drawn():
    # even: both emit 2, 3, 2, 3, ... and finish in the same step (39 tokens after the first
    # need 16 steps of 2.5: 40 tokens, capped at 39) -> prefill step 1 + 16 decode steps
    assert _finish_steps(Mtp(3, 2.5)) == [17, 17]
    # drawn with a spread: their own means differ, so they finish in different steps
    drawn = _finish_steps(Mtp(3, 2.5, spread=0.2))
    assert drawn[0] != drawn[1]
    assert _finish_steps(Mtp(3, 2.5, spread=0.2)) == drawn  # reproducible


def test_a_calibration_spread_reaches_the_engine():
    from harness.serve.profiles import load_profile
    from harness.sim.config import setup_from_profile

    prof = load_profile("hisparse384")
    drawn = setup_from_profile(prof, None, {"acceptance_spread": 0.2}).build()
    assert drawn.scheduler.mtp.spread == 0.2 and drawn.scheduler.mtp.spec_tokens == 3
    assert setup_from_profile(prof).build().scheduler.mtp.spread is None  # roofline defaults
