"""vLLM 0.32.0's HiSparse pool for GLM-5.3, checked by hand (harness/sim/hisparse_layout.py).

Block: the largest group page is the indexer's, 132 B x 64 tokens x 22 indexer layers (21 and the
MTP layer's) = 185,856 B, rounded up to a multiple of one fp8_ds_mla page (656 B x 64 = 41,984):
5 x 41,984 = 209,920 B. Without MTP: 21 x 8,448 = 177,408, also 5 pages: 209,920 B.
Hot rows: (max decode query length + 1) x top-K = (4 + 1) x 2,048 = 10,240 with MTP3, 4,096
without; 160 and 64 blocks in each of the 21 hot groups.
Runtime buffers per index group: 256 seqs x hot rows x (4 + 2) B, plus 4 x swap rows x 2,048 x
4 B with swap rows = min(32,768, 256 x query length): MTP3 256 x 10,240 x 6 = 15,728,640 and
4 x 1,024 x 8,192 = 33,554,432, x 22 groups = 1,084,227,584 B; no MTP 256 x 4,096 x 6 =
6,291,456 and 4 x 256 x 8,192 = 8,388,608, x 21 = 308,281,344 B.
"""

from __future__ import annotations

from harness.capacity.model import find_model_for
from harness.serve.profiles import load_profile
from harness.sim.config import load_calibration, setup_from_profile
from harness.sim.hisparse_layout import vllm_hisparse_layout

GLM = find_model_for("zai-org/GLM-5.3")


def layout(spec: int):
    assert GLM is not None
    return vllm_hisparse_layout(
        GLM, dtype="fp8", spec_tokens=spec, max_num_seqs=256, max_num_batched_tokens=32768
    )


def test_mtp3_blocks_groups_hot_region_and_runtime_buffers():
    lay = layout(3)
    assert lay.block_bytes == 209_920
    assert lay.groups == 21
    assert lay.hot_rows == 10_240
    assert lay.hot_blocks(64) == 21 * 160 == 3_360
    assert lay.tail_blocks == 42
    assert lay.runtime_bytes == 1_084_227_584
    assert lay.residency_args(64) == {
        "latent_units": 21,
        "indexer_units": 1,
        "lease_units": 3_402,
    }


def test_without_mtp_the_block_is_the_same_and_the_hot_region_smaller():
    lay = layout(0)
    assert lay.block_bytes == 209_920
    assert lay.hot_rows == 4_096
    assert lay.hot_blocks(64) == 21 * 64
    assert lay.runtime_bytes == 308_281_344


def test_the_pool_is_what_the_profile_leaves_less_buffers_and_the_null_block():
    lay = layout(3)
    free = 20 * 2**30  # 21,474,836,480 B
    # (21,474,836,480 - 1,084,227,584) // 209,920 = 97,135; less the null block
    assert lay.pool_blocks(free) == 97_134


def test_a_calibrated_hisparse_profile_runs_on_that_pool():
    """The shipped calibration (vLLM 0.32 residency, runtime_gib fitted): the pool is the free
    KV bytes in 209,920 B blocks, and a request's resident 64-token block costs 22 of them."""
    from harness.gate.simnight import DEFAULT_CALIBRATION

    setup = setup_from_profile(load_profile("hisparse384"), load_calibration(DEFAULT_CALIBRATION))
    facts = setup.facts
    assert facts["hisparse_block_bytes"] == 209_920
    expected = int((facts["free_kv_gib"] * 2**30 - 1_084_227_584) // 209_920) - 1
    assert setup.pool_units == expected
    residency = setup.build().residency
    assert residency.resident_units == 22 and residency.lease_units == 3_402
    assert residency.window_blocks == 1_024  # 2 x 32,768 tokens in flight / 64
