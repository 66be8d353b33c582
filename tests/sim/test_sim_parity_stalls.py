"""Shared pauses in CPU-parity replays (harness/sim/parity_stalls.py), by hand-built cases."""

from __future__ import annotations

import random
from itertools import pairwise

import pandas as pd
import pytest

from harness.sim.parity import CpuCost, CpuServe, CpuSetup
from harness.sim.parity_stalls import SharedStalls, StallWindows, shared_stalls
from harness.sim.request import Request


def _stream(start: float, ttft: float, itl: list[float]) -> dict:
    return {"start_s": start, "ttft_s": ttft, "itl_s": itl, "success": True}


def test_a_pause_is_a_long_gap_that_two_streams_start_together():
    steady = [0.02] * 10
    frame = pd.DataFrame(
        [
            # A and B: first token at 0.5 s, two 20 ms gaps, then both stop 0.25 s from 0.54 s
            _stream(0.0, 0.5, [0.02, 0.02, 0.25, *steady]),
            _stream(0.1, 0.4, [0.02, 0.02, 0.26, *steady]),
            _stream(0.0, 1.5, [0.30, *steady]),  # C alone: 0.3 s from 1.5 s, not shared
            _stream(2.0, 0.1, [0.05, 0.09, *steady]),  # D: nothing above the 0.1 s floor
        ]
    )
    stalls = shared_stalls(frame)
    assert stalls.durations_s == pytest.approx((0.26,))  # 0.54 -> 0.80, the later end
    last_token = 2.0 + 0.1 + 0.05 + 0.09 + 0.2  # D's
    assert stalls.rate_per_s == pytest.approx(1 / last_token)


def test_failed_requests_and_a_point_without_gaps_have_no_pauses():
    frame = pd.DataFrame([_stream(0.0, 0.5, [0.02] * 5), _stream(0.0, 0.5, [])])
    assert shared_stalls(frame) == SharedStalls(0.0, ())
    failed = pd.DataFrame([{**_stream(0.0, 0.5, [0.5, 0.5]), "success": False}] * 2)
    assert shared_stalls(failed).rate_per_s == 0.0


def test_mean_wait_is_rate_times_the_mean_square_duration_over_two():
    # rate 2/s, durations 0.1 and 0.3 s: E[d^2] = 0.05, so 2 x 0.05 / 2 = 0.05 s
    assert SharedStalls(2.0, (0.1, 0.3)).mean_wait_s == pytest.approx(0.05)
    assert SharedStalls(0.0, ()).mean_wait_s == 0.0
    assert SharedStalls(2.0, (0.1, 0.3)).mean_duration_s == pytest.approx(0.2)
    assert SharedStalls(0.0, ()).mean_duration_s == 0.0


def test_drawn_pauses_are_disjoint_repeatable_and_at_the_measured_rate():
    stalls = SharedStalls(1.5, (0.1, 0.2, 0.3))
    first = stalls.windows(random.Random(7), 100.0, 4_000.0).windows
    assert first == stalls.windows(random.Random(7), 100.0, 4_000.0).windows
    assert all(a < b <= c for (a, b), (c, _) in pairwise(first))
    assert all(round(b - a, 9) in (0.1, 0.2, 0.3) for a, b in first)
    assert 100.0 < first[0][0] and first[-1][0] <= 4_100.0
    # gaps between pauses are exponential at 1.5/s, so the pauses start at 1 / (1/1.5 + 0.2)/s
    assert len(first) / 4_000.0 == pytest.approx(1 / (1 / 1.5 + 0.2), rel=0.05)


def test_something_due_inside_a_pause_gets_through_at_its_end():
    pauses = StallWindows([(1.0, 1.2), (3.0, 3.5)])
    assert pauses.release(0.9) == 0.9
    assert pauses.release(1.0) == 1.2 and pauses.release(1.19) == 1.2
    assert pauses.release(1.2) == 1.2 and pauses.release(2.0) == 2.0
    assert pauses.release(3.4) == 3.5 and pauses.release(9.0) == 9.0


def test_a_seeded_engine_sends_requests_caught_in_a_pause_together_at_its_end():
    """Three replies end inside one pause and one after it: the three next turns are sent at
    the pause's end; each then spends the out-of-engine time less the mean pause wait."""
    engine = CpuSetup(CpuServe(4, 128, 128, 2048, 512, True), CpuCost(1.0, 0.0, 0.0, 0.0)).build()
    engine.overhead_s, engine.overhead_sd_s = 0.05, 0.0
    engine.rng = random.Random(1)
    engine.stalls = StallWindows([(1.0, 1.3)])
    engine.stall_mean_wait_s = 0.02
    for rid, sent in enumerate((1.05, 1.1, 1.29, 1.4)):
        engine.receive(Request(rid=rid, conv=rid, turn=2, prompt=100, max_out=4, arrival=sent))
    ready = sorted(t for t, _, _ in engine.pending)
    assert ready == pytest.approx([1.33, 1.33, 1.33, 1.43])
