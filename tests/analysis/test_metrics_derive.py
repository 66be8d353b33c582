"""Unit tests for harness.analysis.metrics on hand-built sample sets, and summary parsing."""

from __future__ import annotations

import pytest

from harness.analysis.metrics import client_in_flight_mean, counter_delta, derive_point_metrics
from harness.client.evalscope import parse_percentiles, parse_summary
from harness.client.scrape import Sample, parse_metrics
from harness.errors import RunError
from harness.measurement import Measurement, RequestRecord


def derive(samples, *, client=None, percentiles=(), parallel: int, gpus: int):
    """The metrics of a measurement holding these samples, summary and percentile rows."""
    m = Measurement(
        "EvalScope",
        samples=tuple(samples),
        client=client,
        percentiles=parse_percentiles(list(percentiles)),
    )
    return derive_point_metrics(m, parallel=parallel, gpus=gpus)


def s(t: float, name: str, value: float, **labels: str) -> Sample:
    return Sample(timestamp=1000.0 + t, monotonic=t, name=name, labels=labels, value=value)


SUMMARY_17 = {
    "Test Duration (s)": 10.0,
    "Concurrency": 4,
    "Request Rate (req/s)": -1,
    "Total Requests": 24,
    "Success Requests": 24,
    "Failed Requests": 0,
    "Req Throughput (req/s)": 2.4,
    "Avg Latency (s)": 1.5,
    "Avg Input Tokens": 800.0,
    "Avg Output Tokens": 64.0,
    "Output Throughput (tok/s)": 153.6,
    "Total Throughput (tok/s)": 2073.6,
    "TTFT (ms)": 40.0,
    "TPOT (ms)": 20.0,
    "ITL (ms)": 15.0,
    "Input Throughput (tok/s)": 0.0,
    "Avg Turns/Request": 3.0,
    "KV Cache Hit Rate (%)": 75.0,
}
SUMMARY_110 = {
    **{k: v for k, v in SUMMARY_17.items() if k not in ("TTFT (ms)", "TPOT (ms)", "ITL (ms)")},
    "Avg TTFT (ms)": 40.0,
    "Avg TPOT (ms)": 20.0,
    "Avg ITL (ms)": 19.9,
    "Stream Requests": 24,
    "Non-Stream Requests": 0,
}


def test_both_summary_key_spellings_parse_to_the_same_fields():
    old, new = parse_summary(SUMMARY_17), parse_summary(SUMMARY_110)
    assert old.mean_tpot_ms == new.mean_tpot_ms == 20.0
    assert old.mean_ttft_ms == new.mean_ttft_ms == 40.0
    assert (old.mean_itl_ms, new.mean_itl_ms) == (15.0, 19.9)
    assert old.total_requests == new.total_requests == 24
    assert old.kv_cache_hit_rate_pct == 75.0
    assert new.raw["Stream Requests"] == 24


def test_summary_missing_required_key_names_it():
    bad = dict(SUMMARY_17)
    del bad["Failed Requests"]
    with pytest.raises(RunError, match="Failed Requests|failed_requests"):
        parse_summary(bad)


def test_client_metrics_from_summary_and_gpu_divisor():
    client = parse_summary(SUMMARY_17)
    rows = [
        {"Percentiles": "50%", "TTFT (ms)": 30.0, "TPOT (ms)": 19.0},
        {"Percentiles": "99%", "TTFT (ms)": 90.0, "TPOT (ms)": 25.0},
    ]
    out = derive([], client=client, percentiles=rows, parallel=4, gpus=8).metrics
    assert out["interactivity"] == pytest.approx(50.0)
    assert out["throughput_per_gpu"] == pytest.approx(2073.6 / 8)
    assert out["output_throughput_per_gpu"] == pytest.approx(153.6 / 8)
    assert out["output_tps_per_user"] == pytest.approx(153.6 / 4)
    assert out["client_kv_cache_hit_rate"] == pytest.approx(0.75)
    assert (out["p99_ttft_ms"], out["p99_tpot_ms"]) == (90.0, 25.0)
    cpu = derive([], client=client, parallel=4, gpus=0).metrics
    assert cpu["throughput_per_gpu"] == pytest.approx(2073.6)  # max(gpus, 1)


def test_occupancy_is_mean_of_nonzero_engine_sums():
    samples = [
        s(0, "vllm:num_requests_running", 0, engine="0"),
        s(0, "vllm:num_requests_running", 0, engine="1"),
        s(1, "vllm:num_requests_running", 3, engine="0"),
        s(1, "vllm:num_requests_running", 2, engine="1"),
        s(2, "vllm:num_requests_running", 4, engine="0"),
        s(2, "vllm:num_requests_running", 3, engine="1"),
        s(3, "vllm:num_requests_running", 0, engine="0"),
        s(3, "vllm:num_requests_running", 0, engine="1"),
    ]
    out = derive(samples, client=None, parallel=8, gpus=1).metrics
    assert out["occupancy"] == pytest.approx((5 + 7) / 2)


def test_occupancy_is_null_not_zero_without_nonzero_samples():
    samples = [s(t, "vllm:num_requests_running", 0, engine="0") for t in range(3)]
    out = derive(samples, client=None, parallel=1, gpus=1).metrics
    assert out["occupancy"] is None
    assert derive([], client=None, parallel=1, gpus=1).metrics["occupancy"] is None


def test_engine_occupancy_is_inference_time_over_the_span_of_the_requests():
    """Every finished request's engine time counts, whatever the scrapes saw: here the running
    gauge caught one request once, while 4 + 2 + 2 engine-seconds passed in a 4 s span."""
    name = "vllm:request_inference_time_seconds_sum"
    samples = [
        s(0, name, 100.0, engine="0"),
        s(0, name, 50.0, engine="1"),
        s(0, "vllm:num_requests_running", 0, engine="0"),
        s(2, "vllm:num_requests_running", 1, engine="0"),
        s(5, name, 105.0, engine="0"),
        s(5, name, 53.0, engine="1"),
    ]
    reqs = (
        RequestRecord(10.0, 14.0, True),
        RequestRecord(11.0, 13.0, True),
        RequestRecord(12.0, 14.0, True),
        RequestRecord(13.0, None, False),
    )
    measured = Measurement("EvalScope", samples=tuple(samples), requests=reqs)
    out = derive_point_metrics(measured, parallel=4, gpus=1).metrics
    assert out["engine_occupancy"] == pytest.approx((5 + 3) / 4)
    assert out["occupancy"] == 1.0
    # The simulated engine at time scale K = 2: its histograms count virtual seconds, the
    # request records the client's wall clock, so the 4 s span is 8 engine seconds.
    scaled = Measurement("EvalScope", samples=tuple(samples), requests=reqs, time_scale=2.0)
    out = derive_point_metrics(scaled, parallel=4, gpus=1).metrics
    assert out["engine_occupancy"] == pytest.approx((5 + 3) / 8)
    # Without request records the client's duration is the span; without the histogram, null.
    summary = parse_summary(SUMMARY_17)  # Test Duration 10 s
    assert derive(samples, client=summary, parallel=4, gpus=1).metrics[
        "engine_occupancy"
    ] == pytest.approx(0.8)
    running_only = [x for x in samples if x.name != name]
    assert (
        derive(running_only, client=summary, parallel=4, gpus=1).metrics["engine_occupancy"] is None
    )


def test_counter_reset_is_handled_and_counted():
    samples = [
        s(0, "vllm:num_preemptions_total", 10),
        s(1, "vllm:num_preemptions_total", 15),
        s(2, "vllm:num_preemptions_total", 2),
        s(3, "vllm:num_preemptions_total", 6),
    ]
    value, resets = counter_delta(samples, "vllm:num_preemptions")
    assert (value, resets) == (5 + 2 + 4, 1)
    derived = derive(samples, client=None, parallel=1, gpus=1)
    assert derived.metrics["preemptions"] == 11
    assert derived.counter_resets == 1


def test_counters_sum_over_engines_and_accept_both_names():
    samples = [
        s(0, "vllm:spec_decode_num_drafts_total", 100, engine="0"),
        s(0, "vllm:spec_decode_num_drafts_total", 50, engine="1"),
        s(5, "vllm:spec_decode_num_drafts_total", 200, engine="0"),
        s(5, "vllm:spec_decode_num_drafts_total", 150, engine="1"),
        s(0, "vllm:spec_decode_num_accepted_tokens", 0, engine="0"),
        s(5, "vllm:spec_decode_num_accepted_tokens", 300, engine="0"),
        s(0, "vllm:spec_decode_num_draft_tokens_total", 0, engine="0"),
        s(5, "vllm:spec_decode_num_draft_tokens_total", 600, engine="0"),
    ]
    out = derive(samples, client=None, parallel=1, gpus=1).metrics
    assert out["mtp_acceptance_length"] == pytest.approx(1 + 300 / 200)
    assert out["spec_acceptance_rate"] == pytest.approx(0.5)


def test_no_spec_decode_means_null_acceptance():
    samples = [s(0, "vllm:num_preemptions_total", 0), s(1, "vllm:num_preemptions_total", 0)]
    out = derive(samples, client=None, parallel=1, gpus=1).metrics
    assert out["mtp_acceptance_length"] is None
    assert out["spec_acceptance_rate"] is None
    assert out["preemptions"] == 0
    assert out["prefix_cache_hit_rate"] is None


def test_gauges_prefix_cache_server_tpot_and_kv_max_over_engines():
    samples = [
        s(0, "vllm:num_requests_waiting", 0, engine="0"),
        s(1, "vllm:num_requests_waiting", 4, engine="0"),
        s(1, "vllm:num_requests_waiting", 2, engine="1"),
        s(0, "vllm:kv_cache_usage_perc", 0.2, engine="0"),
        s(0, "vllm:kv_cache_usage_perc", 0.6, engine="1"),
        s(1, "vllm:kv_cache_usage_perc", 0.9, engine="0"),
        s(1, "vllm:kv_cache_usage_perc", 0.1, engine="1"),
        s(0, "vllm:prefix_cache_hits_total", 100),
        s(1, "vllm:prefix_cache_hits_total", 400),
        s(0, "vllm:prefix_cache_queries_total", 1000),
        s(1, "vllm:prefix_cache_queries_total", 1400),
        s(0, "vllm:request_time_per_output_token_seconds_sum", 1.0),
        s(1, "vllm:request_time_per_output_token_seconds_sum", 1.5),
        s(0, "vllm:request_time_per_output_token_seconds_count", 10),
        s(1, "vllm:request_time_per_output_token_seconds_count", 35),
    ]
    out = derive(samples, client=None, parallel=1, gpus=1).metrics
    assert out["waiting_mean"] == pytest.approx(3.0) and out["waiting_max"] == 6
    assert out["kv_cache_usage_mean"] == pytest.approx(0.75) and out["kv_cache_usage_max"] == 0.9
    assert out["prefix_cache_hit_rate"] == pytest.approx(300 / 400)
    assert out["server_tpot_ms"] == pytest.approx(0.5 / 25 * 1000)


def test_connector_metrics_when_present():
    gib = float(1 << 30)
    samples = [
        s(0, "vllm:hisparse_cache_hits_total", 0),
        s(1, "vllm:hisparse_cache_hits_total", 90),
        s(0, "vllm:hisparse_cache_misses_total", 0),
        s(1, "vllm:hisparse_cache_misses_total", 10),
        s(0, "vllm:hisparse_host_to_device_bytes_total", 0),
        s(1, "vllm:hisparse_host_to_device_bytes_total", 2 * gib),
        s(0, "vllm:kv_offload_total_bytes_total", 0, transfer_type="CPU_to_GPU"),
        s(1, "vllm:kv_offload_total_bytes_total", gib, transfer_type="CPU_to_GPU"),
        s(0, "vllm:kv_offload_total_bytes_total", 0, transfer_type="GPU_to_CPU"),
        s(1, "vllm:kv_offload_total_bytes_total", 3 * gib, transfer_type="GPU_to_CPU"),
    ]
    out = derive(samples, client=None, parallel=1, gpus=1).metrics
    assert out["hisparse_hit_rate"] == pytest.approx(0.9)
    assert out["hisparse_h2d_gib"] == pytest.approx(2.0)
    assert out["offload_load_gib"] == pytest.approx(1.0)
    assert out["offload_store_gib"] == pytest.approx(3.0)
    none = derive([], client=None, parallel=1, gpus=1).metrics
    assert none["hisparse_hit_rate"] is None and none["offload_load_gib"] is None


def test_client_in_flight_is_time_weighted():
    reqs = [
        RequestRecord(0.0, 4.0, True),
        RequestRecord(1.0, 3.0, True),
        RequestRecord(2.0, 4.0, True),
        RequestRecord(3.0, None, False),
    ]
    assert client_in_flight_mean(reqs) == pytest.approx((4 + 2 + 2) / 4)
    assert client_in_flight_mean([]) is None


def test_parser_keeps_total_sample_names_and_drops_created():
    text = (
        "# HELP vllm:num_preemptions_total Preemptions\n"
        "# TYPE vllm:num_preemptions_total counter\n"
        'vllm:num_preemptions_total{engine="0",model_name="tiny"} 7.0\n'
        'vllm:num_preemptions_created{engine="0",model_name="tiny"} 1.7e9\n'
        "# HELP vllm:iteration_tokens_total Tokens per step\n"
        "# TYPE vllm:iteration_tokens_total histogram\n"
        'vllm:iteration_tokens_total_bucket{engine="0",le="1.0"} 3.0\n'
        'vllm:iteration_tokens_total_bucket{engine="0",le="+Inf"} 5.0\n'
        'vllm:iteration_tokens_total_count{engine="0"} 5.0\n'
        'vllm:iteration_tokens_total_sum{engine="0"} 40.0\n'
        "# TYPE python_gc_objects_collected counter\n"
        'python_gc_objects_collected_total{generation="0"} 1.0\n'
    )
    samples = parse_metrics(text, timestamp=1.0, monotonic=2.0)
    names = {x.name for x in samples}
    assert "vllm:num_preemptions_total" in names
    assert "vllm:iteration_tokens_total_sum" in names
    assert not any(n.endswith("_created") or n.startswith("python_") for n in names)
    assert all(x.labels.get("engine") == "0" for x in samples)
