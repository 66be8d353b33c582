"""HiSparse / offloading metrics as real vLLM exposes them (docs/vllm.md §3.3)."""

from __future__ import annotations

import pytest

from harness.analysis.metrics import derive_point_metrics
from harness.client.scrape import Sample
from harness.measurement import Measurement

GIB = float(1 << 30)


def s(t: float, name: str, value: float, **labels: str) -> Sample:
    return Sample(timestamp=1000.0 + t, monotonic=t, name=name, labels=labels, value=value)


def derive(samples: list[Sample]):
    return derive_point_metrics(
        Measurement("EvalScope", samples=tuple(samples)), parallel=1, gpus=8
    )


def test_deprecated_offload_counters_use_exact_case_labels() -> None:
    samples = [
        s(0, "vllm:kv_offload_total_bytes_total", 0, transfer_type="CPU_to_GPU"),
        s(1, "vllm:kv_offload_total_bytes_total", 2 * GIB, transfer_type="CPU_to_GPU"),
        s(0, "vllm:kv_offload_total_bytes_total", 0, transfer_type="GPU_to_CPU"),
        s(1, "vllm:kv_offload_total_bytes_total", 5 * GIB, transfer_type="GPU_to_CPU"),
        # lower-case labels are not what vLLM emits: they must not be counted
        s(0, "vllm:kv_offload_total_bytes_total", 0, transfer_type="cpu_to_gpu"),
        s(1, "vllm:kv_offload_total_bytes_total", 100 * GIB, transfer_type="cpu_to_gpu"),
    ]
    out = derive(samples).metrics
    assert out["offload_load_gib"] == pytest.approx(2.0)
    assert out["offload_store_gib"] == pytest.approx(5.0)


def test_hisparse_host_gauges_are_read() -> None:
    samples = []
    for t, (usage0, usage1, pend0, pend1) in enumerate([(0.2, 0.4, 3, 1), (0.6, 0.5, 0, 2)]):
        samples += [
            s(t, "vllm:hisparse_host_cache_usage_perc", usage0, engine="0"),
            s(t, "vllm:hisparse_host_cache_usage_perc", usage1, engine="1"),
            s(t, "vllm:hisparse_pending_page_transfers", pend0, engine="0"),
            s(t, "vllm:hisparse_pending_page_transfers", pend1, engine="1"),
        ]
    derived = derive(samples)
    out = derived.metrics
    # usage: max over engines per scrape (0.4, 0.6); pending: summed over engines (4, 2)
    assert out["hisparse_host_cache_usage_mean"] == pytest.approx(0.5)
    assert out["hisparse_host_cache_usage_max"] == pytest.approx(0.6)
    assert out["hisparse_pending_transfers_mean"] == pytest.approx(3.0)
    assert out["hisparse_pending_transfers_max"] == pytest.approx(4.0)
    assert derived.info["hisparse_gauge_samples"] == 2
    none = derive([]).metrics
    assert none["hisparse_host_cache_usage_mean"] is None
    assert none["hisparse_pending_transfers_max"] is None


def test_hisparse_hit_rate_without_counter_update_is_null_and_coarse() -> None:
    # the hot-buffer counters moved before the window and not inside it (sampled every 2,000
    # worker steps): 0 hits / 0 lookups is "not measured", never a 0 % hit rate
    samples = [
        s(t, name, value)
        for t in range(4)
        for name, value in (
            ("vllm:hisparse_cache_hits_total", 900.0),
            ("vllm:hisparse_cache_misses_total", 100.0),
        )
    ]
    derived = derive(samples)
    assert derived.metrics["hisparse_hit_rate"] is None
    assert derived.info["hisparse_counter_updates"] == 0
    assert derived.info["hisparse_hit_rate_coarse"] is True


def test_hisparse_hit_rate_one_update_is_marked_coarse() -> None:
    samples = [
        s(0, "vllm:hisparse_cache_hits_total", 0),
        s(1, "vllm:hisparse_cache_hits_total", 75),
        s(2, "vllm:hisparse_cache_hits_total", 75),
        s(0, "vllm:hisparse_cache_misses_total", 0),
        s(1, "vllm:hisparse_cache_misses_total", 25),
        s(2, "vllm:hisparse_cache_misses_total", 25),
    ]
    derived = derive(samples)
    assert derived.metrics["hisparse_hit_rate"] == pytest.approx(0.75)
    assert derived.info["hisparse_counter_updates"] == 1
    assert derived.info["hisparse_hit_rate_coarse"] is True
