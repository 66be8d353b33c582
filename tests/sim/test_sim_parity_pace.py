"""CPU parity at a measured run's own pace: the simulated server's request-time sums as vLLM
defines them (hand-checked timeline), the gauge's time average, and the fixed point that
recovers a known pace from the times it produced."""

from __future__ import annotations

import pandas as pd
import pytest

from harness import metric_names as mn
from harness.analysis.request_table import COLUMNS, TABLE_NAME, write_table
from harness.errors import RunError
from harness.sim.client import PointClient, Workload
from harness.sim.parity import (
    CpuCost,
    CpuEngine,
    CpuServe,
    CpuSetup,
    RequestTimes,
    StatsScheduler,
)
from harness.sim.parity_pace import (
    Pace,
    Target,
    next_paces,
    point_workload,
    sim_prefill,
    sim_tpot,
    solve_paces,
)

STEP = CpuCost(step_s=0.01, per_seq_s=0.0, per_prefill_token_s=0.0, overhead_s=0.0)


def engine(blocks: int, cost: CpuCost) -> CpuEngine:
    serve = CpuServe(
        blocks=blocks,
        block_tokens=128,
        max_num_seqs=128,
        max_num_batched_tokens=2048,
        max_model_len=1024,
        prefix_caching=True,
    )
    built = CpuSetup(serve, cost).build()
    assert isinstance(built, CpuEngine)
    return built


def stats(eng: CpuEngine) -> StatsScheduler:
    assert isinstance(eng.scheduler, StatsScheduler)
    return eng.scheduler


def test_request_times_follow_vllms_definitions_on_a_hand_checked_timeline():
    # 8 usable blocks; two 600-token prompts with 3-token replies take 5 blocks each, so the
    # second waits for the first. Every step takes 10 ms. A: admitted at 0, prefilled in step 1
    # (first token at 0.01), decoded in steps 2-3 (done at 0.03). B: queued from 0 to 0.03,
    # prefilled in step 4 (0.04), decoded in steps 5-6 (done at 0.06).
    eng = engine(9, STEP)
    client = PointClient(Workload(((600,), (600,))), [0, 1], 2, 1, 3, 1024)
    eng.run_point(client, 0.025)
    t = stats(eng).times
    assert t.requests == 2 and t.decode_tokens == 4
    assert t.queue_s == pytest.approx(0.03)
    assert t.prefill_s == pytest.approx(0.02)
    assert t.decode_s == pytest.approx(0.04)
    counters = eng.counters()
    assert counters[mn.hist_sum(mn.REQUEST_QUEUE_TIME_SECONDS)] == pytest.approx(0.03)
    assert counters[mn.hist_sum(mn.REQUEST_INFERENCE_TIME_SECONDS)] == pytest.approx(0.06)
    assert counters[mn.hist_count(mn.REQUEST_DECODE_TIME_SECONDS)] == 2.0
    # The gauge reads 1 after steps 1-2 and 4-5 and 0 after step 3 (A gone, B not yet
    # admitted: vLLM's stats come before the next schedule) and after step 6: 40 ms at 1.
    stats(eng).hold(eng.now)
    gauge = stats(eng).gauge
    assert gauge.running_s == pytest.approx(0.04) and gauge.busy_s == pytest.approx(0.04)
    assert gauge.nonzero_mean == pytest.approx(1.0)


def test_a_fixed_point_step_scales_by_measured_over_simulated_and_stays_bounded():
    paces = {"a": Pace(1.0, 2.0, 0.05), "b": Pace(1.0, 1.0, 0.0)}
    targets = {"a": Target(0.004, 0.010, 0.05), "b": Target(1e9, 1e-12, 0.0)}
    times = {
        "a": RequestTimes(2, 0.0, 0.040, 0.020, 10),  # tpot 2 ms, prefill 20 ms per request
        "b": RequestTimes(1, 0.0, 0.010, 0.010, 10),
    }
    out, change = next_paces(paces, targets, times)
    assert out["a"] == Pace(2.0, 1.0, 0.05)  # decode x (4 / 2), prefill x (10 / 20)
    assert (out["b"].decode_scale, out["b"].prefill_scale) == (1e3, 1e-3)  # clamped
    assert change == pytest.approx(999.0)
    with pytest.raises(RunError, match="finished no request"):
        next_paces(paces, targets, {**times, "b": RequestTimes()})


def test_pace_scales_the_step_cost_and_sets_the_points_own_overhead():
    base = CpuCost(0.001, 0.002, 1e-5, 0.03, 0.01, resent_reply_tokens=14.0)
    cost = Pace(0.5, 3.0, 0.07).cost(base)
    assert (cost.step_s, cost.per_seq_s) == (0.0005, 0.001)
    assert cost.per_prefill_token_s == pytest.approx(3e-5)
    assert cost.overhead_at(8) == 0.07 and cost.resent_reply_tokens == 14.0


BASE = CpuCost(step_s=0.002, per_seq_s=0.001, per_prefill_token_s=2e-5, overhead_s=0.0)
# six two-turn conversations at c3 on 12 usable blocks: pressure, so requests queue
WORKLOAD = Workload(tuple((400 + 50 * i, 120) for i in range(6)))


def sweep(paces: dict[str, Pace]) -> dict[str, RequestTimes]:
    """Two points on one engine, each at its pace (as parity_run.simulate_like does)."""
    eng = engine(13, BASE)
    out = {}
    for pid, conversations in (("a", [0, 1, 2]), ("b", [3, 4, 5])):
        eng.cost = paces[pid].cost(BASE)
        eng.overhead_s = paces[pid].overhead_s
        before = RequestTimes(**vars(stats(eng).times))
        eng.run_point(PointClient(WORKLOAD, conversations, 3, 2, 64, 1024), 0.25)
        out[pid] = stats(eng).times.minus(before)
    return out


def test_the_fixed_point_recovers_a_known_pace_from_the_times_it_produced():
    truth = {"a": Pace(0.4, 2.5, 0.02), "b": Pace(1.7, 0.6, 0.05)}
    measured = sweep(truth)
    assert measured["a"].queue_s > 0  # the pool makes requests wait
    targets = {
        pid: Target(sim_tpot(t), sim_prefill(t), truth[pid].overhead_s)
        for pid, t in measured.items()
    }
    paces, change = solve_paces(targets, sweep)
    assert change < 0.01
    for pid, pace in paces.items():
        assert pace.decode_scale == pytest.approx(truth[pid].decode_scale, rel=0.03)
        assert pace.prefill_scale == pytest.approx(truth[pid].prefill_scale, rel=0.03)
        assert pace.overhead_s == truth[pid].overhead_s


def test_a_points_workload_takes_the_prompts_the_server_counted(tmp_path):
    # conversation 1: prompts 528, 668, 796 with 64-token replies -> new tokens 528, 76, 64;
    # conversation 0 failed its turn 3 and conversation 2 lacks turn 2: both stay templated;
    # -1 is no dataset conversation.
    rows = [
        (1, 1, 528, True),
        (1, 2, 668, True),
        (1, 3, 796, True),
        (0, 1, 528, True),
        (0, 2, 650, True),
        (0, 3, 790, False),
        (2, 1, 528, True),
        (2, 3, 800, True),
        (-1, 1, 999, True),
    ]
    frame = pd.DataFrame([dict.fromkeys(COLUMNS) for _ in rows])
    for column, values in zip(("conversation", "turn", "prompt_tokens", "success"), zip(*rows)):
        frame[column] = list(values)
    write_table(tmp_path / TABLE_NAME, frame)
    templated = Workload(((528, 60, 60, 60),) * 3, "t")
    out = point_workload(tmp_path, templated, 64)
    assert out.turns[1] == (528, 76, 64, 60)  # the later turn stays as it was
    assert out.turns[0] == (528, 58, 60, 60)  # turns 1-2 as served, turn 3 failed
    assert out.turns[2] == (528, 60, 60, 60)
