"""The seeded replays of a CPU parity prediction (harness.sim.parity_spread): the spread they
draw with, the draws, and the distribution of a cell's preemption total."""

from __future__ import annotations

import math
import random
import statistics

import pandas as pd
import pytest

from harness.sim.parity import CpuCost, CpuServe, CpuSetup
from harness.sim.parity_run import ParityRow
from harness.sim.parity_spread import (
    draw_delay,
    pooled_sd,
    total_distribution,
    total_interval,
)
from harness.sim.request import Request


def test_pooled_sd_takes_deviations_within_each_turn_and_skips_single_requests():
    frame = pd.DataFrame({"turn": [1, 1, 2, 2, 2, 3], "latency_s": [1.0, 3.0, 2.0, 2.0, 5.0, 9.0]})
    # turn 1: 1 + 1 = 2 on 1 degree of freedom; turn 2 (mean 3): 1 + 1 + 4 = 6 on 2; turn 3 alone
    assert pooled_sd(frame, "turn", "latency_s") == pytest.approx(math.sqrt(8 / 3))
    assert pooled_sd(frame[frame.turn == 3], "turn", "latency_s") == 0.0


def test_draws_have_the_mean_and_spread_asked_for_and_repeat_with_the_seed():
    draws = [draw_delay(random.Random(7), 0.1, 0.01)]
    rng = random.Random(7)
    many = [draw_delay(rng, 0.1, 0.01) for _ in range(20_000)]
    assert many[0] == draws[0]  # the same seed, the same first draw
    assert min(many) > 0
    assert statistics.fmean(many) == pytest.approx(0.1, rel=0.01)
    assert statistics.stdev(many) == pytest.approx(0.01, rel=0.03)
    assert draw_delay(rng, 0.1, 0.0) == 0.1 and draw_delay(rng, 0.0, 0.01) == 0.0


def test_total_distribution_convolves_the_repeats_empirical_counts():
    # two repeats, each 0 or 1 preemption half the time: totals 0, 1, 2 at 1/4, 1/2, 1/4
    assert total_distribution([[0, 1], [1, 0, 0, 1]]) == pytest.approx([0.25, 0.5, 0.25])
    assert total_interval([[0, 1], [1, 0, 0, 1]]) == (0, 2)
    # 16 seeds: 12 zeros and 4 ones per repeat, three repeats
    per = [0] * 12 + [1] * 4
    dist = total_distribution([per, per, per])
    assert dist[0] == pytest.approx(0.75**3) and dist[3] == pytest.approx(0.25**3)
    assert total_interval([per, per, per]) == (0, 2)  # P(<=1) = 0.84, P(<=2) = 0.98
    assert total_interval([[2, 2]]) == (2, 2)
    with pytest.raises(ValueError, match="without ensemble draws"):
        total_distribution([[0], []])


def test_a_seeded_engine_draws_each_requests_out_of_engine_time_and_an_unseeded_one_does_not():
    serve = CpuServe(4, 128, 128, 2048, 512, True)

    def ready_times(seed: int | None) -> list[float]:
        engine = CpuSetup(serve, CpuCost(1.0, 0.0, 0.0, 0.0)).build()
        engine.overhead_s, engine.overhead_sd_s = 0.05, 0.01
        if seed is not None:
            engine.rng = random.Random(seed)
        for rid in range(6):
            engine.receive(Request(rid=rid, conv=rid, turn=1, prompt=100, max_out=4, arrival=1.0))
        return sorted(t for t, _, _ in engine.pending)

    assert ready_times(None) == [1.05] * 6
    drawn = ready_times(3)
    assert drawn == ready_times(3) and drawn != ready_times(4)
    assert len(set(drawn)) == 6 and all(t > 1.0 for t in drawn)


def test_the_prediction_is_the_ensembles_mean_where_there_is_one():
    row = ParityRow("p", "c4", 1, {"preemptions": 1.0}, {"preemptions": 0.0}, (0, 1, 1, 0))
    assert row.preemptions_predicted == 0.5
    assert ParityRow("p", "c4", 1, {}, {"preemptions": 2.0}).preemptions_predicted == 2.0
