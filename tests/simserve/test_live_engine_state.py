"""The live engine's bookkeeping, driven by hand (deterministic): its virtual clock under a
wall-clock stall, on a fake clock, and the prefix hits of a preempted request.

A stall of the server's engine thread (the interpreter busy elsewhere, the machine loaded) puts
the engine behind the wall clock. A request that arrives then must wait in the engine's arrival
queue until the engine's clock reaches it; the engine once jumped its clock to the wall instead,
which gave every running request an idle gap no engine has."""

from __future__ import annotations

import types

import numpy as np
import pytest

from harness.serve.profiles import load_profile
from harness.sim.config import setup_from_profile
from harness.sim.serve import live as live_module
from harness.sim.serve.live import LiveEngine
from harness.sim.serve.tokens import Prompt, block_hashes

K = 4.0
STALL_WALL_S = 0.1


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += max(0.0, seconds)


def _prompt(n: int, offset: int) -> Prompt:
    ids = np.arange(n, dtype=np.int32) + offset
    return Prompt(ids, block_hashes(ids, 64))


def _run(monkeypatch: pytest.MonkeyPatch, stall: bool) -> tuple[LiveEngine, list[float], dict]:
    """Request A decodes alone; after its 5th step B arrives (after a stall if `stall`)."""
    clock = FakeClock()
    monkeypatch.setattr(
        live_module, "time", types.SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep)
    )
    engine = setup_from_profile(load_profile("hisparse384")).build()
    step_times: list[float] = []
    step_time = engine.cost.step_time

    def timed(stats):
        dt = step_time(stats)
        step_times.append(dt)
        return dt

    engine.cost.step_time = timed  # type: ignore[method-assign]
    handles: dict = {}
    steps_of_a = 0

    def emit(events):
        nonlocal steps_of_a
        for h, kind, _ in events:
            if h is handles["a"] and kind == "tokens":
                steps_of_a += 1
                if steps_of_a == 5:
                    if stall:
                        clock.t += STALL_WALL_S  # the engine thread was descheduled
                    handles["b"] = live.submit(_prompt(2_000, 50_000), 8)
            if kind == "done" and "b" in handles and all(x.e2e_s for x in handles.values()):
                live._stop = True

    live = LiveEngine(engine, time_scale=K, emit=emit)

    def idle_wait(until_virtual):  # nothing else runs on a fake clock: go straight there
        if until_virtual is not None:
            clock.t = max(clock.t, live.wall_at(until_virtual) + 1e-9)  # past float round-off

    live._idle_wait = idle_wait  # type: ignore[method-assign]
    handles["a"] = live.submit(_prompt(3_000, 0), 600)
    live._loop()
    return live, step_times, handles


def test_a_request_arriving_while_the_engine_is_behind_waits_for_the_engine_clock(monkeypatch):
    live, step_times, handles = _run(monkeypatch, stall=True)
    a, b = handles["a"], handles["b"]
    behind = STALL_WALL_S * K
    # B was received 0.4 virtual s ahead of the engine's clock: it is stamped there ...
    assert live.behind_at_arrival_s == pytest.approx(behind, rel=0.05)
    assert b.req.arrival == pytest.approx(b.received_at)
    # ... and A kept decoding meanwhile, past B's stamp: the engine was idle only while A's
    # prompt was rendered, so its clock is the sum of its steps (a jump to the wall would have
    # added the 0.4 s to it and to A's latency).
    assert a.req.finished_at > b.received_at
    render = live.engine.frontend_s_per_token * 3_000
    assert live.engine.now == pytest.approx(sum(step_times) + render, abs=1e-6)
    assert live.lag_s >= behind * 0.99  # the stall is still counted as lag


def test_without_a_stall_the_arrival_is_stamped_at_once_and_nothing_lags(monkeypatch):
    live, step_times, handles = _run(monkeypatch, stall=False)
    b = handles["b"]
    assert b.req.arrival == b.received_at <= b.req.first_token_at
    assert live.behind_at_arrival_s == 0.0
    assert live.lag_s == 0.0
    render = live.engine.frontend_s_per_token * 3_000
    assert live.engine.now == pytest.approx(sum(step_times) + render, abs=1e-6)


@pytest.mark.parametrize("profile", ["offload512", "hisparse384"])
def test_a_preempted_first_turn_finds_the_blocks_it_computed_itself(profile):
    """A first turn matches no earlier history (its cap is 0 blocks), but once it has computed
    its prompt, a preemption leaves those blocks in the prefix cache, as vLLM does: readmitted,
    it hits them instead of recomputing 5,000 tokens (offline does the same), all but the last
    block, which the MTP drafter has recomputed (vLLM's drop_eagle_block)."""
    engine = setup_from_profile(load_profile(profile)).build()
    live = LiveEngine(engine, time_scale=1.0, emit=lambda events: None)  # driven by hand
    handle = live.submit(_prompt(5_000, 0), 50)
    req = handle.req
    live._admit_arrivals()
    engine.now = req.arrival + 1.0  # past the frontend's rendering
    engine.admit_ready()
    batch = live.sched.schedule(engine.now)
    assert [(item.req, item.tokens) for item in batch] == [(req, 5_000)]
    stats = engine.step_stats(batch)
    live._apply(batch, stats, engine.now + engine.cost.step_time(stats))
    assert req.computed == 5_000
    assert engine.residency.max_hit_blocks(req) == 0  # running, it matches nothing earlier
    live.sched.running.remove(req)
    live.sched._preempt(req)
    own = 5_000 // 64
    assert engine.residency.max_hit_blocks(req) == own
    assert engine.residency.lookup(req).gpu_blocks == own - 1
