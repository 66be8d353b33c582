"""The calculator's arithmetic, checked against numbers worked out by hand from the constants.

Constants (docs/recipe.md §7.2): shared 19.556 GiB, routed 684.167 GiB, utilisation 0.92, reserve
15 GiB; fp8 blocks 3,052,800 / 184,320 / 2,875,392 B; bf16 5,928,192 / 294,912 / 5,750,784 B;
64-token blocks, 20 groups, 2 retained pages per group, 0 other blocks, max seqs 1,024.
"""

from __future__ import annotations

import math

import pytest

from harness.capacity.deployment import GIB, js_to_fixed, make_deployment, mtp_hot_rows
from harness.capacity.formulas import capacity_at, evaluate, parse_seq_range
from harness.errors import ConfigError

H200_GIB = 141e9 / 2**30  # 131.3165... GiB


def test_h200_tp8_fp8_weights_kv_and_pools() -> None:
    dep = make_deployment(gpu="h200", tp=8)
    # weights/GPU = 19.556/8 + 684.167/8 = 2.4445 + 85.520875 = 87.965375 GiB
    assert dep.weights_gib_per_gpu == pytest.approx(87.965375, abs=1e-9)
    # KV = toFixed(131.3165 x 0.92 - 87.965375 - 15, 1) = toFixed(120.8112 - 102.9654, 1)
    #    = toFixed(17.8458, 1) = 17.8
    assert H200_GIB * 0.92 - 87.965375 - 15 == pytest.approx(17.8458, abs=1e-4)
    assert dep.kv_gib_per_gpu == 17.8
    lim = capacity_at(dep, 142000, 4096)
    # baseline pool = floor(17.8 x 2^30 / 3,052,800) = floor(6260.68) = 6260
    assert lim.baseline_pool == 6260
    # HiSparse pool = floor(17.8 x 2^30 / 184,320) = floor(103692.95) = 103692
    assert lim.gpu_pool == 103692
    # ceil(142000 / 64) = ceil(2218.75) = 2219 blocks per request
    assert lim.baseline_per_request == 2219
    # per request = 2219 indexer + 20 x ceil(4096/64)=1280 hot + 20 x 2 = 40 retained = 3539
    assert (lim.indexer_per_request, lim.hot_per_request, lim.resident_per_request) == (
        2219,
        1280,
        40,
    )
    assert lim.hisparse_gpu_per_request == 3539


# docs/vllm.md §6.2's worked table:
# (context, baseline, HiSparse buf 4096, MTP3 buf 10240, host GiB/req)
WORKED_TABLE = [
    # 74,160: ceil = 1159; 6260 // 1159 = 5; 103692 // (1159+1280+40=2479) = 41;
    #         103692 // (1159+3200+40=4399) = 23; 1159 x 2,875,392 / 2^30 = 3.10
    (74160, 5, 41, 23, 3.10),
    # 142,000: 2219; 6260 // 2219 = 2; 103692 // 3539 = 29; 103692 // 5459 = 18; 5.94
    (142000, 2, 29, 18, 5.94),
    # 262,144: 4096; 6260 // 4096 = 1; 103692 // 5416 = 19; 103692 // 7336 = 14; 10.97
    (262144, 1, 19, 14, 10.97),
    # 1,048,576: 16384; 0; 103692 // 17704 = 5; 103692 // 19624 = 5; 43.875 -> 43.9
    (1048576, 0, 5, 5, 43.9),
]


@pytest.mark.parametrize(("seq", "baseline", "hisparse", "mtp3", "host_gib"), WORKED_TABLE)
def test_worked_table(seq: int, baseline: int, hisparse: int, mtp3: int, host_gib: float) -> None:
    result = evaluate(make_deployment(spec_tokens=3), seq)
    assert result.baseline_requests == baseline
    assert result.default.hisparse_requests == hisparse
    assert result.mtp is not None and result.mtp.hisparse_requests == mtp3
    per_request = result.default.limits.host_per_request * 2875392 / GIB
    decimals = len(str(host_gib).split(".")[1])  # the table's printed precision
    assert round(per_request, decimals) == host_gib


def test_mtp_hot_rows_rule() -> None:
    # (spec + 2) x top-K: MTP3 -> 5 x 2048 = 10,240 rows -> 20 x 160 = 3,200 hot pages per request
    assert mtp_hot_rows(3, 2048) == 10240
    assert mtp_hot_rows(0, 2048) == 4096  # no MTP: the calculator's default
    dep = make_deployment(spec_tokens=1)
    result = evaluate(dep, 142000)
    assert result.mtp is not None and result.mtp.hot_rows == 6144
    # 2219 + 20 x 96 + 40 = 4179; 103692 // 4179 = 24
    assert result.mtp.limits.hisparse_gpu_per_request == 4179
    assert result.mtp.hisparse_requests == 24
    # the calculator figure is unchanged by --spec-tokens
    assert result.default.hisparse_requests == 29


def test_spec_tokens_beyond_int16_buffer_is_an_error() -> None:
    make_deployment(spec_tokens=14)  # (14 + 2) x 2048 = 32,768: the maximum
    with pytest.raises(ConfigError, match="32,768"):
        make_deployment(spec_tokens=15)  # 34,816 rows


def test_min_host_pool_and_follow_minimum() -> None:
    result = evaluate(make_deployment(), 142000)
    # ceil(29 x 2219 x 2,875,392 / 2^30) = ceil(172.33) = 173 GiB
    assert 29 * 2219 * 2875392 / GIB == pytest.approx(172.33, abs=0.01)
    assert result.default.min_host_pool_gib == 173
    assert result.default.host_pool_gib == 173.0  # the slider follows the minimum
    assert result.default.limits.host_limit == 29  # floor(173 GiB / 2,875,392) // 2219 = 29
    # MTP3 at 74,160: ceil(23 x 1159 x 2,875,392 / 2^30) = ceil(71.38) = 72
    mtp = evaluate(make_deployment(spec_tokens=3), 74160).mtp
    assert mtp is not None and mtp.min_host_pool_gib == 72


def test_min_host_pool_is_zero_and_slider_clamped_when_residency_wins() -> None:
    # At 8,192 tokens with --max-seqs 4 the baseline already reaches max seqs: no host pool needed.
    result = evaluate(make_deployment(max_seqs=4), 8192)
    assert result.baseline_requests == 4  # min(4, 6260 // 128 = 48)
    assert result.default.min_host_pool_gib == 0
    assert result.default.host_pool_gib == 16.0  # clamped to the slider minimum
    assert result.default.multiplier == 1.0


def test_host_limited() -> None:
    result = evaluate(make_deployment(host_pool_gib=64), 142000)
    # host pool = floor(64 x 2^30 / 2,875,392) = floor(23899.98) = 23899 blocks; 23899 // 2219 = 10
    assert result.default.limits.host_pool == 23899
    assert result.default.limits.host_limit == 10
    assert result.default.hisparse_requests == 10  # max(2, min(1024, 29, 10))
    assert result.default.limiter == "host pool"
    assert result.default.limits.hisparse_gpu_limit == 29  # the "GPU concurrency limit" shown


def test_tiny_host_pool_never_below_baseline() -> None:
    # 16 GiB: floor(16 x 2^30 / 2,875,392) = 5974 blocks -> 2 requests; max(baseline 2, 2) = 2
    result = evaluate(make_deployment(host_pool_gib=16), 142000)
    assert result.default.limits.host_limit == 2
    assert result.default.hisparse_requests == 2
    assert result.default.multiplier == 1.0


def test_ram_budget_clamps_host_pool_and_indexer_offload() -> None:
    # No sharing at TP8: 8 copies. RAM 128 GiB -> effective host = min(173, 128 / 8) = 16 GiB
    dep = make_deployment(system_ram_gib=128, share_host=False)
    result = evaluate(dep, 142000)
    assert result.default.effective_host_pool_gib == 16.0
    assert result.default.hisparse_requests == 2  # 5974 // 2219 = 2 = baseline
    # indexer offload = min(128, max(0, 128 - 16 x 8)) = 0
    assert result.default.indexer_offload["effective_gib"] == 0.0
    assert result.default.ram_warning is not None
    # requested = 173 x 8 + 128 = 1,512 GiB > 128
    assert "1,512 GiB" in result.default.ram_warning


def test_indexer_offload_coverage() -> None:
    result = evaluate(make_deployment(), 142000)
    # per request = 2219 x 184,320 x 8 = 3,272,048,640 B; floor(128 x 2^30 / that) = floor(42.004)
    assert result.default.indexer_offload["per_request_gib"] * GIB == pytest.approx(3272048640)
    assert result.default.indexer_offload["coverage_requests"] == 42
    # physical host = 173 x 1 + 128 = 301 GiB
    assert result.default.physical_host_gib == 301.0
    off = evaluate(make_deployment(indexer_offload_gib=0), 142000)
    assert off.default.indexer_offload["coverage_requests"] is None  # "Off"


def test_bf16_swaps_all_three_blocks() -> None:
    dep = make_deployment(kv_dtype="bf16")
    assert (dep.baseline_block_bytes, dep.hisparse_block_bytes, dep.host_block_bytes) == (
        5928192,
        294912,
        5750784,
    )
    lim = capacity_at(dep, 142000, 4096)
    # floor(17.8 x 2^30 / 5,928,192) = floor(3224.02) = 3224; 3224 // 2219 = 1
    assert lim.baseline_pool == 3224 and lim.baseline_limit == 1
    # floor(17.8 x 2^30 / 294,912) = floor(64807.82) = 64807; 64807 // 3539 = 18
    assert lim.gpu_pool == 64807 and lim.offloaded_gpu_limit == 18
    # min host = ceil(18 x 2219 x 5,750,784 / 2^30) = ceil(213.93) = 214
    assert evaluate(dep, 142000).default.min_host_pool_gib == 214


def test_dp_and_ep_variants() -> None:
    # DP2 TP4 EP: weights = 19.556/4 + 684.167/8 = 4.889 + 85.520875 = 90.409875
    dep = make_deployment(tp=4, dp=2, ep=True)
    assert dep.weights_gib_per_gpu == pytest.approx(90.409875)
    # KV = toFixed(120.8136 - 90.409875 - 15, 1) = toFixed(15.4037, 1) = 15.4
    assert dep.kv_gib_per_gpu == 15.4
    result = evaluate(dep, 142000)
    # per DP: floor(15.4 x 2^30 / 3,052,800) = 5416 -> 5416 // 2219 = 2; totals double
    assert result.default.limits.baseline_limit == 2 and result.baseline_requests == 4
    # floor(15.4 x 2^30 / 184,320) = floor(89711.50) = 89711 -> 89711 // 3539 = 25 per DP, 50 total
    assert result.default.limits.gpu_pool == 89711
    assert result.default.hisparse_requests == 50
    assert dep.gpus == 8
    # EP off duplicates the experts per DP replica: 4.889 + 684.167/4 = 175.93 GiB: does not fit
    with pytest.raises(ConfigError, match="does not fit"):
        make_deployment(tp=4, dp=2, ep=False)
    # ... but fits a B300: 288e9/2^30 x 0.92 = 246.76; 246.76 - 175.93 - 15 = 55.83 -> 55.8
    b300 = make_deployment(gpu="b300", tp=4, dp=2, ep=False)
    assert b300.kv_gib_per_gpu == 55.8
    # EP on/off is identical at DP1
    assert make_deployment(ep=False).kv_gib_per_gpu == make_deployment(ep=True).kv_gib_per_gpu


def test_hbm_gib_and_kv_override() -> None:
    dep = make_deployment(hbm_gib=141e9 / 2**30)
    assert dep.kv_gib_per_gpu == 17.8
    forced = make_deployment(kv_gib_per_gpu=20.0)
    # floor(20 x 2^30 / 3,052,800) = 7034 -> 7034 // 2219 = 3
    assert capacity_at(forced, 142000, 4096).baseline_limit == 3


def test_multiplier_infinite_and_undefined() -> None:
    result = evaluate(make_deployment(), 1048576)
    assert result.baseline_requests == 0 and math.isinf(result.default.multiplier or 0)
    assert result.to_json()["multiplier"] == "inf"
    empty = evaluate(make_deployment(kv_gib_per_gpu=0.0), 142000)
    assert empty.default.hisparse_requests == 0 and empty.to_json()["multiplier"] is None
    assert evaluate(make_deployment(), 142000).to_json()["multiplier"] == 14.5  # 29 / 2


def test_max_seqs_caps_both_limits() -> None:
    # host 384 GiB: floor(384 x 2^30 / 2,875,392) = 143395 blocks // 1159 = 123 requests
    result = evaluate(make_deployment(max_seqs=16, host_pool_gib=384), 74160)
    assert result.default.limits.host_limit == 123
    assert result.default.hisparse_requests == 16  # min(16, 41, 123)
    assert result.default.limiter == "max sequences"
    # following the minimum pool instead, ceil(16 x 1159 x 2,875,392 / 2^30) = 50 GiB holds
    # exactly 16 requests (18671 // 1159), and the calculator marks the host pool as the limiter
    following = evaluate(make_deployment(max_seqs=16), 74160)
    assert following.default.min_host_pool_gib == 50
    assert following.default.hisparse_requests == 16
    assert following.default.limiter == "host pool"
    assert evaluate(make_deployment(max_seqs=3), 74160).baseline_requests == 3  # min(3, 5)


def test_composition_at_the_limit_adds_up() -> None:
    result = evaluate(make_deployment(), 142000)
    comp = result.default.composition
    gpu = comp["gpu"]["segments"]
    assert comp["concurrency_per_dp"] == 29
    assert comp["gpu"]["total_bytes"] == 141e9 * 8
    # 29 requests x 2219 indexer pages x 184,320 B x TP8
    assert gpu["Indexer KV"] == 29 * 2219 * 184320 * 8
    assert not comp["fully_resident"]  # 29 x (2219 + ceil(2219 x 2,875,392 / 184,320)) > 103692
    assert gpu["Hot buffers"] == 29 * 1280 * 184320 * 8
    # weights + reserve + KV segments = the GPUs' bytes (unused is what KV leaves)
    assert sum(gpu.values()) == pytest.approx(141e9 * 8)
    cpu = comp["cpu"]["segments"]
    assert cpu["HiSparse latent KV"] == 29 * 2219 * 2875392


def test_composition_fully_resident_at_low_concurrency() -> None:
    result = evaluate(make_deployment(), 8192, concurrency=1)
    comp = result.default.composition
    # 1 x (128 + ceil(128 x 2,875,392 / 184,320) = 1997) <= 103692: no hot buffers
    assert comp["fully_resident"] and comp["gpu"]["segments"]["Hot buffers"] == 0
    assert comp["gpu"]["segments"]["Standard KV"] == 1997 * 184320 * 8


def test_js_to_fixed_matches_javascript_rounding() -> None:
    assert js_to_fixed(0.25, 1) == 0.3  # (0.25).toFixed(1) === "0.3"; round() gives 0.2
    assert js_to_fixed(1.005, 2) == 1.0  # 1.005 is 1.00499999... in binary
    assert js_to_fixed(17.848, 1) == 17.8


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tp": 1}, "does not fit"),  # 19.556 + 684.167 + 15 > 120.8
        ({"tp": 3}, "tensor parallel sizes"),
        ({"dp": 3}, "data parallel sizes"),
        ({"gpu": "a100"}, "unknown GPU"),
        ({"host_pool_gib": 0}, "must be > 0"),
        ({"host_pool_gib": -5}, "must be > 0"),
        ({"kv_dtype": "int4"}, "fp8 or bf16"),
        ({"hot_rows": 0}, "--hot-rows"),
        ({"kv_gib_per_gpu": 500.0}, "--kv-gib-per-gpu"),
        ({"indexer_offload_gib": -1}, "--indexer-offload-gib"),
        ({"groups": 0}, "--groups"),
    ],
)
def test_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make_deployment(**kwargs)


def test_seq_range() -> None:
    assert parse_seq_range("8192:10240:1024") == [8192, 9216, 10240]  # STOP inclusive
    assert len(parse_seq_range("8192:1048576:1024")) == 1017  # the calculator's chart grid
    for bad in ("8192:1024", "a:b:c", "10:5:1", "0:10:1"):
        with pytest.raises(ConfigError, match="--seq-range"):
            parse_seq_range(bad)


def test_blog_host_pool_384_gib() -> None:
    # docs/vllm.md §6.2: 384 GiB holds floor(384 x 2^30 / 2,875,392) = 143,395 host blocks,
    # about 64 requests at 142k (143,395 // 2219 = 64): far above the GPU-side 29, so not limiting
    result = evaluate(make_deployment(host_pool_gib=384), 142000)
    assert result.default.limits.host_pool == 143395
    assert result.default.limits.host_limit == 64
    assert result.default.hisparse_requests == 29 and result.default.limiter == "HiSparse GPU pool"
    # vLLM refuses a pool below cdiv(142000, 64) + 2 = 2221 host blocks = 5.95 GiB
    # (docs/vllm.md §1.4)
    small = evaluate(make_deployment(host_pool_gib=5), 142000)
    assert any("vLLM refuses to start" in note for note in small.notes)
    assert round(small.to_json()["vllm_min_host_pool_gib"], 2) == 5.95
