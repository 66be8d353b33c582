"""The step cost built from hardware limits, checked by hand on a small synthetic model."""

from __future__ import annotations

import pytest

from harness.sim.cost import FIT_PARAMS, GIB, Roofline, StepStats, step_stats
from harness.sim.request import Request
from harness.sim.scheduler import Scheduled

US = 1e-6


def _roofline(**over) -> Roofline:
    """Two layers (one MoE, one with an indexer), TP1, 1 TB/s at full efficiency, 10 us floor.

    Dense weights 1e6 B per layer (= 1 us), 100 experts of 1e6 B (top-1), a 2e6 B head; no
    dense FLOPs. Every group at batch 1 is below the floor, so a step is 7 groups x 10 us.
    """
    head = 1000 * 1000 * 2  # vocab x hidden x bf16
    base = {
        "tp": 1,
        "hbm_tbps": 1.0,
        "fp8_tflops": 1000.0,
        "pcie_gbps": 64.0,
        "nvlink_gbps": 100.0,
        "allreduce_us": 15.0,
        "num_layers": 2,
        "moe_layers": 1,
        "indexer_layers": 1,
        "hidden_size": 1000,
        "vocab_size": 1000,
        "shared_gib": (2 * head + 2 * 1e6) / GIB,
        "routed_gib": 1e8 / GIB,
        "ep_shards": 1,
        "n_experts": 100,
        "experts_per_token": 1,
        "expert_params": 1e6,
        "active_params": 1e6 + 2 * 1000 * 1000,
        "indexer_params": 0.0,
        "row_bytes": 1000,
        "indexer_row_bytes": 100,
        "attn_flops_per_row": 0.0,
        "indexer_flops_per_row": 0.0,
        "spec_tokens": 0,
        "hbm_eff": 1.0,
        "gather_eff": 1.0,
        "prefill_eff": 1.0,
        "kernel_floor_us": 10.0,
        "step_overhead_ms": 0.0,
        "pcie_eff": 0.5,
        "host_bytes_scale": 1.25,
        "miss_rate": 0.0,
    }
    return Roofline(**{**base, **over})


def _decode(b: int, width: int) -> StepStats:
    return StepStats(decode_reqs=b, decode_tokens=b * width)


def test_batch_one_is_latency_bound_so_a_4_token_verify_costs_nothing_extra():
    rf = _roofline()
    # per layer dense 10 + attention 10 (x2 layers), MoE 10, indexer 10, head 10 = 70 us
    assert rf.step_time(_decode(1, 1)) == pytest.approx(70 * US)
    # 4 tokens touch 1 - 0.99^4 = 3.9 % of the experts: 3.9 us, still under the 10 us floor
    assert rf.step_time(_decode(1, 4)) == pytest.approx(70 * US)


def test_large_batch_is_bandwidth_bound_on_the_experts_touched():
    rf = _roofline()
    # 500 tokens touch 1 - 0.99^500 of 1e8 B = 99.343 us; the other 6 groups stay at 10 us
    touched = 1 - 0.99**500
    assert rf.step_time(_decode(500, 1)) == pytest.approx((60 + 100 * touched) * US)
    # halving the achieved bandwidth doubles the bandwidth-bound group only
    slow = _roofline(hbm_eff=0.5)
    assert slow.step_time(_decode(500, 1)) == pytest.approx((60 + 200 * touched) * US)


def test_mtp_drafts_are_one_layer_forwards():
    rf = _roofline(spec_tokens=3)
    # 3 drafts x (dense + attention + MoE + indexer + head) = 3 x 50 us, all at the floor
    assert rf.draft_time(_decode(1, 4)) == pytest.approx(150 * US)
    assert rf.step_time(_decode(1, 4)) == pytest.approx(220 * US)
    assert rf.draft_time(StepStats(prefill_tokens=100)) == 0.0  # no decode, no drafts


def test_tp_allreduce_is_latency_then_volume():
    rf = _roofline(tp=8)
    assert rf._allreduce(1) == pytest.approx(15 * US)
    # 2 x 7/8 x 1000 tokens x 1000 hidden x 2 B = 3.5 MB over 100 GB/s x 0.8 = 43.75 us
    assert rf._allreduce(1000) == pytest.approx(43.75 * US)


def test_the_indexer_is_replicated_not_divided_by_tp():
    keys = 10_000_000  # 1e9 B of keys (100 B per token): 1 ms at 1 TB/s
    one = _roofline()._layers(1, 0, keys, 0)
    eight = _roofline(tp=8, ep_shards=8)._layers(1, 0, keys, 0)
    assert one[3] == pytest.approx(1e-3)
    assert eight[3] == pytest.approx(1e-3)  # the same per rank at TP8
    shared = (2 * 2e6 + 2 * 1e9) / GIB  # head and embedding + 1e9 B per layer
    # dense weights are sharded: 1 ms at TP1, 125 us per rank at TP8
    assert _roofline(shared_gib=shared)._layers(1, 0, 0, 0)[0] == pytest.approx(1e-3)
    tp8 = _roofline(tp=8, ep_shards=8, shared_gib=shared)
    assert tp8._layers(1, 0, 0, 0)[0] == pytest.approx(125 * US)


def test_efficiency_bounds_are_physical():
    assert FIT_PARAMS["hbm_eff"] == (0.6, 0.9)
    assert FIT_PARAMS["prefill_eff"][0] == 0.15
    assert FIT_PARAMS["acceptance_length"] == (1.0, 4.0)


def _item(*, offloaded: bool, prefill: bool, context: int, tokens: int) -> Scheduled:
    req = Request(1, 0, 2, context + tokens, 220, 0.0, computed=context, offloaded=offloaded)
    return Scheduled(req, tokens, prefill, context)


def test_a_host_resident_prefill_stages_its_whole_history():
    batch = [
        _item(offloaded=True, prefill=True, context=80_000, tokens=753),
        _item(offloaded=False, prefill=True, context=50_000, tokens=753),  # GPU-resident
        _item(offloaded=True, prefill=False, context=70_000, tokens=4),  # decode: top-K misses
    ]
    s = step_stats(batch, topk=2048, verify_width=4)
    assert s.staged_rows == 80_000
    assert s.offloaded_rows == 2048 * 4
    assert s.indexer_pairs == 4 * 70_000
    assert s.prefill_indexer_keys == 80_753 + 50_753


def test_staging_time_is_history_bytes_over_pcie():
    # 80,000 rows x 1,000 B x 1.25 (served layout) = 1e8 B over 64 GB/s x 0.5 = 3.125 ms
    rf = _roofline()
    assert rf.staging_time(80_000) == pytest.approx(3.125e-3)
    s = StepStats(staged_rows=80_000)
    assert rf.step_time(s) == pytest.approx(3.125e-3)  # no tokens: no forward


def test_top_k_rows_are_gathers_at_their_own_bandwidth():
    # 1e5 top-K rows x 656 B = 65.6 MB per layer: 65.6 us at 1 TB/s, over the 10 us floor
    rf = _roofline()
    assert rf._layers(1, 100_000, 0, 0)[1] == pytest.approx(65.6 * US)
    # gathers at 0.4 of the datasheet: 164 us; streams (hbm_eff) do not change them
    assert _roofline(gather_eff=0.4)._layers(1, 100_000, 0, 0)[1] == pytest.approx(164 * US)
    assert _roofline(hbm_eff=0.5)._layers(1, 100_000, 0, 0)[1] == pytest.approx(65.6 * US)
    # and the gather efficiency leaves the weight streams alone (dense group: 1e6 B = 1 us,
    # under the floor either way; MoE at 500 tokens as in the batch test above)
    touched = 1 - 0.99**500
    slow = _roofline(gather_eff=0.2)
    assert slow._layers(500, 0, 0, 0)[2] == pytest.approx(100 * touched * US)
    assert FIT_PARAMS["gather_eff"] == (0.2, 0.9)


def test_miss_copies_run_beside_the_compute_and_only_one_layer_per_unit_waits():
    # 2 layers, 1 index-share unit (the test model): exposed share 1/2. A decode step at batch
    # 1 is 7 groups x 10 us = 70 us of compute.
    rf = _roofline(miss_rate=0.5)
    assert rf.exposed_copy_share == 0.5
    compute = rf.step_time(_decode(1, 1))
    assert compute == pytest.approx(70 * US)
    # 2,048 offloaded rows x 0.5 missing x 1,000 B x 1.25 = 1.28 MB over 32 GB/s = 40 us of
    # copies, under the compute: 70 + 40 / 2 (the unit's first layer waits for its rows)
    s = StepStats(decode_reqs=1, decode_tokens=1, offloaded_rows=2048)
    assert rf.step_time(s) == pytest.approx(90 * US)
    # 8,192 rows: 160 us of copies, over the compute: 160 + 70 / 2
    s = StepStats(decode_reqs=1, decode_tokens=1, offloaded_rows=8192)
    assert rf.step_time(s) == pytest.approx(195 * US)


def test_an_mtp_verify_or_a_step_with_a_prefill_pays_its_copies_in_full():
    # vLLM 0.32.0 prefetches only for single-token decodes: a 4-token verify (MTP3) or a step
    # that carries a prefill chunk stages each layer's rows after the compute before it.
    rf = _roofline(miss_rate=0.5)
    verify = StepStats(decode_reqs=1, decode_tokens=4)
    copies = 2048 * 0.5 * 1000 * 1.25 / 32e9  # 40 us
    s = StepStats(decode_reqs=1, decode_tokens=4, offloaded_rows=2048)
    assert rf.step_time(s) == pytest.approx(rf.step_time(verify) + copies)
    mixed = StepStats(decode_reqs=1, decode_tokens=1, prefill_tokens=100)
    s = StepStats(decode_reqs=1, decode_tokens=1, prefill_tokens=100, offloaded_rows=2048)
    assert rf.step_time(s) == pytest.approx(rf.step_time(mixed) + copies)


def test_overlap_sums_unit_by_unit_pipelines():
    # A unit of n layers with per-layer copy c and compute p takes c + (n - 1) max(c, p) + p;
    # 21 units over 78 layers (GLM-5.3), summed, equal the closed form.
    from harness.sim.cost import overlapped

    for c, p in ((1.0, 3.0), (3.0, 1.0), (2.0, 2.0)):
        sizes = [4] * 15 + [3] * 6  # 78 layers in 21 units
        piped = sum(c + (n - 1) * max(c, p) + p for n in sizes)
        assert overlapped(78 * p, 78 * c, 21 / 78) == pytest.approx(piped)
    assert overlapped(5.0, 0.0, 0.3) == 5.0
