"""The KV pool as vLLM sizes it (issue 24 item 2), by hand: 0.92 x HBM - weights - MTP module -
runtime reserve, the MTP layer in every block, the null block; and the served block bytes."""

from __future__ import annotations

import pytest

from harness.capacity.deployment import make_deployment
from harness.capacity.model import load_model
from harness.serve.profiles import load_profile
from harness.sim.config import setup_from_profile
from harness.sim.facts import COMPUTE
from harness.sim.pool import derived_kv_gib, served_bytes_scale, served_token_bytes

GIB = 2**30


def test_the_derived_pool_by_hand():
    cf = COMPUTE["glm-5.3"]
    dep = make_deployment("glm-5.3", gpu="h200", tp=8)
    # H200: 141e9 B = 131.3165 GiB x 0.92 = 120.81116 GiB; weights 19.556 / 8 + 684.167 / 8
    # = 87.965375 GiB; an 11 GiB runtime reserve leaves 21.845789 GiB without MTP
    assert derived_kv_gib(dep, 11.0, 0, cf) == pytest.approx(21.845789, abs=1e-6)
    # with MTP the module's 9.93e9 FP8 parameters / 8 ranks = 1.156004 GiB go first (20.689785),
    # then every block carries a 79th latent row (576 B) and a 22nd indexer key (132 B):
    # 47,700 -> 48,408 B per token, x 47,700 / 48,408 = 20.387183 GiB of calculator blocks
    assert derived_kv_gib(dep, 11.0, 3, cf) == pytest.approx(20.387183, abs=1e-6)
    # nothing left is an empty pool, not a negative one
    assert derived_kv_gib(dep, 40.0, 0, cf) == 0.0


def test_a_calibrated_setup_uses_the_derived_pool_less_the_null_block():
    params = {"runtime_gib": 11.0}
    mtp = setup_from_profile(load_profile("offload512"), None, params)
    nomtp = setup_from_profile(load_profile("offload512-nomtp"), None, params)
    assert mtp.facts["kv_gib_per_gpu"] == pytest.approx(20.387183, abs=1e-6)
    # 20.387183 GiB / 3,052,800 B = 7,170.65 baseline blocks -> 7,170, minus the null block
    assert mtp.pool_units == 7169
    # 21.845789 GiB / 3,052,800 B = 7,683.68 -> 7,683, minus the null block
    assert nomtp.pool_units == 7682
    hisparse = setup_from_profile(load_profile("hisparse384"), None, params)
    # HiSparse pages of 184,320 B: 20.387183 GiB -> 118,763.95 -> 118,763, minus the null block
    assert hisparse.pool_units == 118762


def test_only_the_gpu_facts_change_the_pool():
    params = {"runtime_gib": 11.0}
    b200 = setup_from_profile(load_profile("offload512-nomtp"), None, params, gpu="b200")
    # B200: 180e9 B = 167.6381 GiB x 0.92 = 154.227018 GiB - 87.965375 - 11 = 55.261643 GiB
    assert b200.facts["kv_gib_per_gpu"] == pytest.approx(55.261643, abs=1e-6)
    # 55.261643 GiB / 3,052,800 B = 19,436.82 -> 19,436, minus the null block
    assert b200.pool_units == 19435


def test_an_explicit_budget_still_wins_over_the_derived_one():
    setup = setup_from_profile(
        load_profile("offload512-nomtp"), None, {"runtime_gib": 11.0, "kv_gib_per_gpu": 20.0}
    )
    # mtp_kv_gib: without MTP the module's 1.156004 GiB come back to the pool
    assert setup.facts["kv_gib_per_gpu"] == pytest.approx(21.156004, abs=1e-6)


def test_served_block_bytes_by_hand():
    model = load_model("glm-5.3")
    # served fp8_ds_mla rows are 656 B (512 latent + 16 scales + 128 RoPE), the calculator's
    # 576 B; indexer keys 132 B on 21 layers; the calculator's block is 47,700 B per token.
    # No MTP: 78 x 656 + 21 x 132 = 51,168 + 2,772 = 53,940 B -> 1.130818
    assert served_bytes_scale(model, "fp8", 0) == pytest.approx(53940 / 47700)
    # MTP: the MTP layer adds one latent row and one key: 79 x 656 + 22 x 132 = 54,728 B
    assert served_bytes_scale(model, "fp8", 3) == pytest.approx(54728 / 47700)
    assert served_bytes_scale(model, "bf16", 3) == 1.0  # no served row size for BF16
    # a derived pool brings the served bytes with it (unless a calibration sets them)
    setup = setup_from_profile(load_profile("offload512"), None, {"runtime_gib": 11.0})
    assert setup.roofline.host_bytes_scale == pytest.approx(54728 / 47700)
    fitted = setup_from_profile(
        load_profile("offload512"), None, {"runtime_gib": 11.0, "host_bytes_scale": 1.2}
    )
    assert fitted.roofline.host_bytes_scale == 1.2


def test_vllm_blocks_hold_the_served_rows_in_the_offloading_and_plain_arms():
    """With vLLM's layout (the vllm-0.32 residency) a GPU block of the offloading arm holds the
    served rows, the same bytes its CPU copy takes, not the calculator's 576 B rows."""
    model = load_model("glm-5.3")
    assert served_token_bytes(model, "fp8", 3) == 54728  # 79 x 656 + 22 x 132
    assert served_token_bytes(model, "fp8", 0) == 53940  # 78 x 656 + 21 x 132
    assert served_token_bytes(model, "bf16", 0) is None
    params = {"runtime_gib": 11.0}
    mtp = setup_from_profile(load_profile("offload512"), None, params, residency="vllm-0.32")
    nomtp = setup_from_profile(
        load_profile("offload512-nomtp"), None, params, residency="vllm-0.32"
    )
    # MTP: 20.689785 GiB free (above) / (54,728 x 64 = 3,502,592 B) = 6,342.59 -> 6,342, minus
    # the null block; the calculator's blocks of the same bytes were 7,170 (48,408 B per token)
    assert mtp.pool_units == 6341
    # no MTP: 21.845789 GiB / (53,940 x 64 = 3,452,160 B) = 6,794.80 -> 6,794, minus the null block
    assert nomtp.pool_units == 6793
    # the budget reported is unchanged: only the block it is divided by
    assert mtp.facts["kv_gib_per_gpu"] == pytest.approx(20.387183, abs=1e-6)
    # the calculator's geometry stays with the earlier residency and with an explicit pool
    assert setup_from_profile(load_profile("offload512"), None, params).pool_units == 7169
    overridden = load_profile("offload512", ["serve.num-gpu-blocks-override=3000"])
    assert setup_from_profile(overridden, None, params, residency="vllm-0.32").pool_units == 3000
