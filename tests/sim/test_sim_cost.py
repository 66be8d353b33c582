"""The roofline's HiSparse prefill staging term, checked by hand."""

from __future__ import annotations

import pytest

from harness.sim.cost import Roofline, step_stats
from harness.sim.request import Request
from harness.sim.scheduler import Scheduled


def _roofline() -> Roofline:
    """Everything but PCIe zeroed, so that a step's time is its staging copy alone."""
    return Roofline(
        tp=8,
        hbm_tbps=4.8,
        fp8_tflops=1979.0,
        pcie_gbps=64.0,
        allreduce_ms=0.0,
        mtp_draft_ms=0.0,
        shared_gib=0.0,
        routed_gib=0.0,
        ep_shards=8,
        n_experts=256,
        experts_per_token=8,
        active_params=0.0,
        row_bytes=1000,
        indexer_row_bytes=0,
        attn_flops_per_row=0.0,
        indexer_flops_per_row=0.0,
        spec_tokens=0,
        pcie_eff=0.5,
        host_bytes_scale=1.25,
        miss_rate=0.0,
    )


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


def test_staging_time_is_history_bytes_over_pcie():
    # 80,000 rows x 1,000 B x 1.25 (served layout) = 1e8 B over 64 GB/s x 0.5 = 3.125 ms
    s = step_stats(
        [_item(offloaded=True, prefill=True, context=80_000, tokens=753)], topk=2048, verify_width=1
    )
    rf = _roofline()
    assert rf.staging_time(80_000) == pytest.approx(3.125e-3)
    assert rf.step_time(s) == pytest.approx(3.125e-3)
    resident = step_stats(
        [_item(offloaded=False, prefill=True, context=80_000, tokens=753)],
        topk=2048,
        verify_width=1,
    )
    assert rf.step_time(resident) == pytest.approx(0.0)
