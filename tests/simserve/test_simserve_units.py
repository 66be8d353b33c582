"""The simulated server's parts without HTTP: token counting, prefix identity, the live engine,
fault schedules and the client-time rescaling of the run layer."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import numpy as np
import pytest

from harness.dataset import ensure_dataset
from harness.errors import ConfigError
from harness.measurement import ClientPercentiles, Percentiles, time_scaled_summary
from harness.results import ClientSummary
from harness.serve.profiles import load_profile
from harness.sim.config import setup_from_profile
from harness.sim.serve.faults import Faults, FaultState
from harness.sim.serve.live import LiveEngine, PrefixIndex
from harness.sim.serve.tokens import Prompt, PromptCounter, block_hashes


@pytest.fixture(scope="module")
def counter() -> PromptCounter:
    return PromptCounter("tiny:tokenizer", 64)


@pytest.fixture(scope="module")
def conversation() -> list[dict]:
    info = ensure_dataset("cpu-tiny")
    return json.loads(info.path.read_text())["conversations"][0]


def test_prompt_ids_equal_one_full_encode_of_the_template(counter, conversation):
    messages = list(conversation[0]["messages"])
    first = counter.prompt(messages)
    assert np.array_equal(first.ids, counter.full_ids(messages))
    ids, texts = counter.reply(7, 40)
    reply = "".join(texts)
    counter.remember(reply, ids)
    assert np.array_equal(counter.tok.encode([reply])[0], ids)  # replies re-encode to themselves
    messages += [{"role": "assistant", "content": reply}, *conversation[1]["messages"]]
    second = counter.prompt(messages)
    assert np.array_equal(second.ids, counter.full_ids(messages))
    assert second.tokens > first.tokens + 40
    # the history's full blocks hash the same: the prefix cache can recognise them
    assert second.block_hashes[: len(first.block_hashes)] == first.block_hashes


def test_block_hashes_chain_and_prefix_index():
    a = np.arange(300, dtype=np.int32)
    b = a.copy()
    b[150] = -1  # diverges in block 2
    ha, hb = block_hashes(a, 64), block_hashes(b, 64)
    assert len(ha) == 4 and ha[:2] == hb[:2] and ha[2] != hb[2] and ha[3] != hb[3]
    assert block_hashes(a, 64, ha[:2]) == ha  # continuing a chain gives the same chain
    index = PrefixIndex()
    conv, matched = index.match(ha)
    assert matched == 0
    index.store(ha, conv, prompt_blocks=2)  # a 2-block prompt and its reply
    assert index.match(hb) == (conv, 2)  # re-sends the prompt, diverges after it: continues
    assert index.match(ha[:3]) == (conv, 3)  # wholly stored: the conversation replayed
    other, matched = index.match(block_hashes(a + 1000, 64))
    assert other != conv and matched == 0
    assert index.match([])[1] == 0


def test_conversations_sharing_a_system_prompt_stay_apart():
    """Two conversations open with the same 3-block system prompt. Each later turn continues its
    own history; a third conversation with that system prompt is a new one."""
    system = np.arange(192, dtype=np.int32)

    def history(user: int, blocks: int) -> list[bytes]:
        ids = np.concatenate([system, np.full(64 * blocks, user, dtype=np.int32)])
        return block_hashes(ids, 64)

    index = PrefixIndex()
    a1, b1 = history(1, 2), history(2, 2)  # turn 1 of A and of B: 5-block prompts
    conv_a, hit = index.match(a1)
    assert hit == 0
    conv_b, hit = index.match(b1)
    assert hit == 0 and conv_b != conv_a
    index.store(history(1, 4), conv_a, prompt_blocks=5)  # prompt + a 2-block reply
    index.store(history(2, 4), conv_b, prompt_blocks=5)
    assert index.match(history(1, 6)) == (conv_a, 7)  # A's turn 2: all of A's history
    assert index.match(history(2, 6)) == (conv_b, 7)
    conv_c, hit = index.match(history(3, 2))
    assert conv_c not in (conv_a, conv_b) and hit == 0  # shares 3 blocks only: a new one
    # A's turn 3 after a template re-rendered A's first reply: it still covers A's first prompt
    rerendered = list(history(1, 5)[:6]) + list(history(9, 8)[6:])
    assert index.match(rerendered) == (conv_a, 6)


def test_fault_fractions_are_exact_and_deterministic():
    state = FaultState(Faults(fail_rate=0.05))
    fails = [state.fail_request() for _ in range(1000)]
    again = FaultState(Faults(fail_rate=0.05))
    assert sum(fails) == 50 and fails == [again.fail_request() for _ in range(1000)]
    assert not FaultState(Faults(fail_rate=0.5, after_s=3600)).fail_request()
    with pytest.raises(ConfigError, match="fail-rate"):
        Faults(fail_rate=1.5)


def test_count_triggered_faults_land_on_the_same_stream_every_time():
    state = FaultState(Faults(fail_rate=1.0, after_requests=3, metrics_hang_after_requests=5))
    seen = []
    for _ in range(6):
        state.stream_started()
        seen.append((state.fail_request(), state.metrics_hang()))
    # streams 1-3 are spared, 4 on fail; /metrics hangs from the 5th stream on
    assert seen == [(False, False)] * 3 + [(True, False)] + [(True, True)] * 2
    with pytest.raises(ConfigError, match="die-after-requests"):
        Faults(die_after_requests=-1)


def test_the_server_dies_as_the_stream_after_the_nth_arrives():
    code = (
        "from harness.sim.serve.faults import Faults, FaultState\n"
        "state = FaultState(Faults(die_after_requests=2))\n"
        "for n in range(3):\n"
        "    print(n, flush=True)\n"
        "    state.stream_started()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 3 and done.stdout.split() == ["0", "1", "2"]


def test_client_times_are_rescaled_by_k():
    client = ClientSummary(
        total_requests=4,
        success_requests=4,
        failed_requests=0,
        duration_s=10.0,
        concurrency=2,
        request_throughput=0.4,
        output_throughput=88.0,
        total_throughput=1000.0,
        mean_latency_s=5.0,
        mean_ttft_ms=100.0,
        mean_tpot_ms=20.0,
        mean_itl_ms=8.0,
    )
    scaled = time_scaled_summary(client, 4.0)
    assert scaled.duration_s == 40.0 and scaled.mean_tpot_ms == 80.0
    assert scaled.mean_ttft_ms == 400.0 and scaled.mean_latency_s == 20.0
    assert scaled.total_throughput == 250.0 and scaled.output_throughput == 22.0
    assert scaled.raw["repro_time_scale"] == 4.0
    assert time_scaled_summary(client, 1.0) is client
    table = ClientPercentiles(tpot_ms=Percentiles(p99=30.0), latency_s=Percentiles(10.0, 20.0))
    assert table.time_scaled(2).tpot_ms == Percentiles(p99=60.0)
    assert table.time_scaled(2).latency_s == Percentiles(20.0, 40.0)


def _live(profile: str, k: float) -> tuple[LiveEngine, list]:
    engine = setup_from_profile(load_profile(profile)).build()
    events: list = []
    done = threading.Event()

    def emit(batch):
        events.extend(batch)
        if any(kind == "done" for _, kind, _ in batch):
            done.set()

    live = LiveEngine(engine, time_scale=k, emit=emit)
    live.done = done  # type: ignore[attr-defined]
    return live, events


def test_live_engine_streams_mtp_chunks_and_recognises_a_prefix():
    live, events = _live("hisparse384", 200.0)
    live.start()
    try:
        ids = np.arange(5000, dtype=np.int32)
        first = live.submit(Prompt(ids, block_hashes(ids, 64)), 60)
        assert live.done.wait(30)
        chunks = [n for h, kind, n in events if h is first and kind == "tokens"]
        assert sum(chunks) == 60 and max(chunks) > 1  # several tokens per step under MTP3
        history = np.concatenate([ids, np.arange(60, dtype=np.int32) + 9000])
        live.remember_output(first, block_hashes(history, 64))
        live.done.clear()
        nxt = np.concatenate([history, np.arange(500, dtype=np.int32) + 20000])
        second = live.submit(Prompt(nxt, block_hashes(nxt, 64)), 10)
        assert live.done.wait(30)
        # the history's full blocks, less the last, which the MTP drafter recomputes (vLLM's
        # drop_eagle_block)
        assert second.cached_tokens == (len(history) // 64 - 1) * 64
        assert first.cached_tokens == 0 and first.tpot_s and first.tpot_s > 0
        # vLLM observes finish - first scheduled: inside the request's end-to-end time
        assert first.inference_s is not None and first.e2e_s is not None
        assert 0.0 < first.inference_s <= first.e2e_s
    finally:
        live.stop()


def test_live_engine_copies_only_the_rows_missing_from_the_gpu_as_offline_does():
    """A 70,000-token prompt passes HiSparse's admission window (65,536 tokens: two batches of
    32,768 in flight under async scheduling), so the request decodes from the host. With a quarter of its history missing from the GPU, a quarter of its top-K rows are
    copied per step and a quarter of the history before a prefill chunk is staged: the step cost and
    the counters offline use (`Engine.step_stats`). The HTTP engine once counted every row as
    missing, which made its decode ~19 % slower than offline at c1 (docs/simulator.md §8)."""
    from harness.gate.simnight import DEFAULT_CALIBRATION
    from harness.sim.config import load_calibration

    calibration = load_calibration(DEFAULT_CALIBRATION)  # vLLM 0.32.0's window and switch
    eng = setup_from_profile(load_profile("hisparse384"), calibration).build()
    eng.residency.missing_fraction = lambda req: 0.25  # type: ignore[method-assign]
    done = threading.Event()

    def emit(batch):
        if any(kind == "done" for _, kind, _ in batch):
            done.set()

    live = LiveEngine(eng, time_scale=200.0, emit=emit)
    live.done = done  # type: ignore[attr-defined]
    live.start()
    try:
        ids = np.arange(70_000, dtype=np.int32)
        live.submit(Prompt(ids, block_hashes(ids, 64)), 12)
        assert live.done.wait(30)
    finally:
        live.stop()
    assert eng.hisparse_rows > 0
    assert eng.hisparse_misses == pytest.approx(eng.hisparse_rows * 0.25 * eng.miss_rate)
    # Three prefill chunks (32,768 + 32,768 + 4,464 tokens): each after the first stages a
    # quarter of the history before it (32,768 and 65,536 rows).
    assert eng.hisparse_staged == pytest.approx(0.25 * (32_768 + 65_536))


def test_live_engine_virtual_clock_runs_k_times_faster():
    live, _ = _live("hisparse384", 50.0)
    live.start()
    try:
        ids = np.arange(3000, dtype=np.int32)
        handle = live.submit(Prompt(ids, block_hashes(ids, 64)), 200)
        import time

        t0 = time.monotonic()
        assert live.done.wait(30)
        wall = time.monotonic() - t0
        virtual = handle.e2e_s
        # wall ~ virtual / K (plus thread wake-ups); never faster than the virtual clock allows.
        # How close to virtual / K it comes depends on the machine's load (bench_simserve.py);
        # here only that virtual time runs ahead of the wall clock at all.
        assert virtual / 50.0 <= wall + 1e-3
        assert wall < virtual
    finally:
        live.stop()


def test_sweep_request_checks_the_engine_options():
    from harness.run.sweep import SweepRequest

    with pytest.raises(ConfigError, match="--engine"):
        SweepRequest(profile="hisparse384", engine="gpu")
    with pytest.raises(ConfigError, match="--engine sim only"):
        SweepRequest(profile="hisparse384", time_scale=2.0)
    with pytest.raises(ConfigError, match="must be > 0"):
        SweepRequest(profile="hisparse384", engine="sim", time_scale=0.0)
    with pytest.raises(ConfigError, match="--url"):
        SweepRequest(profile="hisparse384", engine="sim", url="http://127.0.0.1:1")
