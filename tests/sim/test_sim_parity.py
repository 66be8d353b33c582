"""CPU parity model: hand-checked server limits, workload, prefix reuse, scheduling on the CPU
pool, and the step-cost fit (numbers worked out in comments)."""

from __future__ import annotations

import json

import pytest

from harness.errors import ConfigError
from harness.sim.cost import StepStats
from harness.sim.mtp import Mtp
from harness.sim.parity import (
    CpuCost,
    PointDeltas,
    ResentResidency,
    cost_from_deltas,
    cpu_serve,
    manifest_workload,
    tiny_kv_bytes_per_token,
)
from harness.sim.request import Request
from harness.sim.scheduler import Scheduler


def profile(serve: dict, env: dict | None = None, model: str = "tiny:tiny-llama") -> dict:
    return {"name": "p", "model": model, "serve": serve, "env": env or {}}


def test_override_keeps_one_null_block_and_bounds_the_static_limit():
    s = cpu_serve(profile({"num-gpu-blocks-override": 16, "max-model-len": 1920}))
    # vLLM's BlockPool takes block 0 as the null block: 15 allocatable.
    assert (s.blocks, s.usable_blocks, s.block_tokens) == (16, 15, 128)
    # CPU server defaults (vLLM 0.32 arg_utils for the OpenAI server on CPU).
    assert (s.max_num_seqs, s.max_num_batched_tokens) == (128, 2048)
    # 1,003 tokens = 8 blocks; 15 // 8 = 1. 600 tokens = 5 blocks; 15 // 5 = 3.
    assert s.static_limit(1003) == 1
    assert s.static_limit(600) == 3


def test_pool_from_kvcache_space_matches_the_servers_8192_blocks():
    # tiny-llama: K+V x 2 layers x 2 KV heads x 64 x 2 B = 1,024 B/token; 1 GiB / (1,024 x 128).
    assert tiny_kv_bytes_per_token("tiny:tiny-llama") == 1024
    s = cpu_serve(profile({"max-model-len": 4096}, {"VLLM_CPU_KVCACHE_SPACE": "1"}))
    assert s.blocks == 8192


@pytest.mark.parametrize(
    ("serve", "env", "model", "words"),
    [
        ({"speculative-config": {"method": "mtp"}}, None, "tiny:tiny-llama", "speculative-config"),
        ({"num-gpu-blocks-override": 12, "max-model-len": 2048}, None, "tiny:tiny-llama", "12"),
        ({"max-model-len": 4096}, None, "tiny:tiny-llama", "VLLM_CPU_KVCACHE_SPACE"),
        ({"num-gpu-blocks-override": 24}, None, "tiny:tiny-dsv3", "MLA"),
        ({"num-gpu-blocks-override": 24}, None, "zai-org/GLM-5.3", "tiny:NAME"),
        (
            {"scheduler-cls": "my.Scheduler", "max-model-len": 1920},
            None,
            "tiny:tiny-llama",
            "scheduler-cls",
        ),
    ],
)
def test_bad_cpu_profiles_are_errors_naming_the_key(serve, env, model, words):
    with pytest.raises(ConfigError, match=words):
        cpu_serve(profile(serve, env, model))


def test_the_tracing_scheduler_is_vllms_own_and_changes_nothing_modelled():
    traced = {"num-gpu-blocks-override": 16, "max-model-len": 1920}
    traced["scheduler-cls"] = "repro_sched_trace.TracingScheduler"
    assert cpu_serve(profile(traced)).usable_blocks == 15


def test_manifest_workload_takes_the_assumed_reply_out_of_templated_counts(tmp_path):
    path = tmp_path / "d.json.manifest.json"
    turns = [{"templated_prompt_tokens": n} for n in (528, 808, 1088)]
    data = {
        "totals": {"assistant_reply_tokens_assumed": 220},
        "conversations": [{"index": 0, "turns": turns}],
    }
    path.write_text(json.dumps(data))
    wl = manifest_workload(path)
    # 808 - 528 - 220 = 60 new tokens (48 user + 12 template) per later turn.
    assert wl.turns == ((528, 60, 60),)
    data["conversations"][0]["turns"][1]["templated_prompt_tokens"] = 700  # shrinks: < 1
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="conversation 0"):
        manifest_workload(path)


def test_finished_turn_keeps_its_reply_blocks_cached_but_the_next_turn_hits_only_its_prompt():
    pol = ResentResidency(20, 128)
    done = Request(0, conv=1, turn=1, prompt=300, max_out=100, arrival=0.0)
    pol.grow(done, 400)
    done.computed, done.out = 399, 100
    pol.release(done)
    # vLLM hashes every full block, the reply's too: 399 // 128 = 3 stay cached ...
    assert pol.pool.cached_blocks(1) == 3
    # ... but the next turn re-sends the reply re-tokenised: it hits 300 // 128 = 2 of them
    nxt = Request(1, conv=1, turn=2, prompt=520, max_out=100, arrival=0.0)
    assert pol.lookup(nxt).gpu_blocks == 2
    live = Request(2, conv=2, turn=1, prompt=300, max_out=100, arrival=0.0)
    pol.grow(live, 400)
    live.computed, live.out = 390, 91
    pol.release(live)
    assert pol.pool.cached_blocks(2) == 3  # 390 // 128: it resumes with the same tokens
    live.computed = 0
    assert pol.lookup(live).gpu_blocks == 3


def test_never_cached_blocks_are_reused_before_a_finished_turns_reply_blocks():
    # vLLM 0.32.0 block_pool.free_blocks: a block without a hash goes to the free queue's
    # front, hashed ones (the reply's full blocks included) to its end. 6 usable blocks: a turn
    # of 300 + 340 tokens (5 blocks: 4 full, 1 partial) finishes; a request then takes 2 blocks:
    # the free one and the partial one, so all 4 cached blocks and the 2-block hit survive.
    pol = ResentResidency(6, 128)
    done = Request(0, conv=1, turn=1, prompt=300, max_out=340, arrival=0.0)
    pol.grow(done, 640)
    done.computed, done.out = 639, 340
    pol.release(done)
    other = Request(1, conv=2, turn=1, prompt=200, max_out=10, arrival=0.0)
    assert pol.grow(other, 200)
    assert pol.pool.cached_blocks(1) == 4
    # a third block comes from the LRU cache, tail first: the reply's last block
    assert pol.grow(other, 300)
    assert pol.pool.cached_blocks(1) == 3
    nxt = Request(2, conv=1, turn=2, prompt=700, max_out=10, arrival=0.0)
    assert pol.lookup(nxt).gpu_blocks == 2


def _sched(usable: int) -> Scheduler:
    return Scheduler(
        ResentResidency(usable, 128), max_num_seqs=128, max_num_batched_tokens=2048, mtp=Mtp(0, 1)
    )


def test_null_block_blocks_an_admission_that_four_blocks_would_allow():
    # --num-gpu-blocks-override 4: 3 usable. A (200 tokens) reserves 2 blocks; B's whole input
    # (200 tokens = 2 blocks) does not fit the 1 left, so B waits (reserve-full-input).
    s = _sched(
        cpu_serve(profile({"num-gpu-blocks-override": 4, "max-model-len": 256})).usable_blocks
    )
    a, b = Request(0, 0, 1, 200, 10, 0.0), Request(1, 1, 1, 200, 10, 0.0)
    s.add(a)
    s.add(b)
    batch = s.schedule(0.0)
    assert [x.req.rid for x in batch] == [0]
    assert (len(s.running), len(s.waiting)) == (1, 1)
    s4 = _sched(4)  # without the null block both would run
    s4.add(Request(0, 0, 1, 200, 10, 0.0))
    s4.add(Request(1, 1, 1, 200, 10, 0.0))
    assert len(s4.schedule(0.0)) == 2


def test_decode_growth_preempts_the_newest_running_request_into_the_waiting_gauge():
    # 3 usable blocks; A and B (100-token prompts) take one block each. Both reach 128 computed
    # tokens in the same step, so each needs a second block for token 129: A (first in running)
    # gets the third block, B finds none and, as the last running request, preempts itself:
    # back at the head of waiting, KV freed. A then holds 100 prompt + 29 decoded tokens.
    s = _sched(3)
    a, b = Request(0, 0, 1, 100, 200, 0.0), Request(1, 1, 1, 100, 200, 0.0)
    s.add(a)
    s.add(b)
    t = 0.0
    while s.counters.preemptions == 0:
        batch = s.schedule(t)
        t += 1.0
        s.update(batch, t)
        assert t < 100
    assert (a.computed, a.blocks, a.preemptions) == (129, 2, 0)
    assert (b.computed, b.blocks, b.preemptions) == (0, 0, 1)
    assert [r.rid for r in s.running] == [0] and [r.rid for r in s.waiting] == [1]


def deltas(label, parallel, *, req, gen, prompt, cached, decode, prefill, latency, occ):
    return PointDeltas(
        label, parallel, req, gen, prompt, cached, decode, prefill, 0.0, decode + prefill,
        latency, occ,
    )  # fmt: skip


def test_cost_fit_recovers_a_known_step_cost():
    a, b, c = 0.003, 0.0005, 5e-5  # step, per decoding request, per prefill token
    # c1: 8 requests x 64 tokens, 250 new prompt tokens each: TPOT a + b; prefill a + b + 250c.
    one = deltas(
        "c1", 1, req=8, gen=512, prompt=4000, cached=2000, decode=(a + b) * 504,
        prefill=8 * (a + b + 250 * c), latency=8 * 0.0 + 0.25, occ=1.0,
    )  # fmt: skip
    # c4 at 4 running: steps = 2048 / 4 = 512; 6,000 new tokens -> 11.72 per step.
    tpot4 = a + 4 * b + c * (6000 * 4 / 2048)
    four = deltas(
        "c4", 4, req=32, gen=2048, prompt=18000, cached=12000, decode=tpot4 * (2048 - 32),
        prefill=0.0, latency=0.5, occ=4.0,
    )  # fmt: skip
    cost = cost_from_deltas([one, four], 13.0, "x")
    assert cost.step_s == pytest.approx(a)
    assert cost.per_seq_s == pytest.approx(b)
    assert cost.per_prefill_token_s == pytest.approx(c)
    # out of engine: c1 0.25 - (0.003 + ...) per request; the line through both points.
    o1 = 0.25 - (one.decode_s + one.prefill_s) / 8
    o4 = 0.5 - (four.decode_s + four.prefill_s) / 32
    assert cost.overhead_at(1) == pytest.approx(o1)
    assert cost.overhead_at(4) == pytest.approx(o4)
    assert cost.step_time(StepStats(decode_reqs=2, prefill_tokens=100)) == pytest.approx(
        a + 2 * b + 100 * c
    )


def test_cost_fit_needs_c1_and_a_higher_point():
    one = deltas(
        "c1", 1, req=1, gen=64, prompt=500, cached=0, decode=0.2, prefill=0.05, latency=0.3,
        occ=1.0,
    )  # fmt: skip
    with pytest.raises(ValueError, match="above c1"):
        cost_from_deltas([one], 0.0, "x")
    assert isinstance(CpuCost(0.001, 0.0, 0.0, 0.0).pcie_bytes_per_s(), float)


def test_gauges_read_the_last_steps_stats_so_a_new_prefill_counts_only_after_its_step():
    # vLLM makes the stats at the end of update_from_output: a request admitted into step 1
    # (prefill, 0-1 s) is not running on the gauge until step 1 is over. Steps take 1 s.
    from harness.sim.client import PointClient, Workload
    from harness.sim.parity import CpuServe, CpuSetup

    serve = CpuServe(4, 128, 128, 2048, 512, True)
    engine = CpuSetup(serve, CpuCost(1.0, 0.0, 0.0, 0.0)).build()
    client = PointClient(Workload(((200,),)), [0], 1, 1, 2, 512)
    res = engine.run_point(client, 0.5)
    running = [(s.timestamp, s.value) for s in res.samples if s.name.endswith("running")]
    usage = [s.value for s in res.samples if s.name.endswith("usage_perc")]
    # start, 0.5 and 1.0 (step 1 in flight): 0; 1.5 and 2.0 (step 2, decode): 1; end: 0.
    assert running == [(0.0, 0), (0.5, 0), (1.0, 0), (1.5, 1), (2.0, 1), (2.0, 0)]
    assert usage[3] == pytest.approx(2 / 3)  # 2 of the 3 usable blocks (200 tokens + 1)
