"""The occupancy a coarse scraper reads at each phase, from a 1 s running gauge."""

from __future__ import annotations

from harness.analysis.metrics import occupancy_by_phase


def test_each_phase_keeps_every_periodth_second_and_skips_idle_samples() -> None:
    # 0..8 s: running 2, 4, 0, 6, 2, 0, 8, 0, 0 (a sample every second)
    running = [(100.0 + t, v) for t, v in enumerate([2, 4, 0, 6, 2, 0, 8, 0, 0])]
    # period 3: phase 0 sees t=0,3,6 (2, 6, 8); phase 1 t=1,4,7 (4, 2, 0); phase 2 t=2,5,8 (0s)
    assert occupancy_by_phase(running, 3) == {0: 16 / 3, 1: 3.0}


def test_clock_jitter_rounds_to_the_nearest_second() -> None:
    running = [(0.0, 1.0), (1.0004, 3.0), (1.9996, 5.0), (3.0002, 7.0)]
    assert occupancy_by_phase(running, 2) == {0: 3.0, 1: 5.0}


def test_period_one_is_the_time_weighted_mean_and_empty_input_reads_nothing() -> None:
    running = [(float(t), float(v)) for t, v in enumerate([1, 0, 3, 5])]
    assert occupancy_by_phase(running, 1) == {0: 3.0}
    assert occupancy_by_phase([], 30) == {}
