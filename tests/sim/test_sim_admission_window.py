"""HiSparse under the vLLM 0.32 residency reserves a resident admission window per request:
min(2 x max-num-batched-tokens, max-model-len) / 64 GPU blocks (two batches in flight under
async scheduling) of resident + indexer pages. With the blog profile's 32,768 batched tokens
and a 40,000-token limit that is 625 blocks x 22 pool blocks (21 resident groups and the
indexer, vLLM 0.32.0's layout) = 13,750. A pool smaller than that could never admit a long
request (the simulator used to wait forever), so the engine refuses to start, in vLLM's words;
under the constant-miss model the same pool starts (its need is the host-resident one: indexer
pages plus a hot region, in the calculator's 17-page geometry)."""

from __future__ import annotations

import pytest

from harness.serve.profiles import load_profile
from harness.sim.config import setup_from_profile
from harness.sim.residency import HiSparseResidency
from harness.sim.startup import EngineRefused, admission_window_blocks

OVERRIDES = ["serve.max-model-len=40000"]


def setup(pages: int, residency: str):
    prof = load_profile("hisparse384", [*OVERRIDES, f"serve.num-gpu-blocks-override={pages}"])
    return setup_from_profile(prof, residency=residency)


def test_the_window_is_the_in_flight_tokens_in_blocks():
    assert admission_window_blocks("hisparse", "vllm-0.32", 32768, 40000, 64) == 625
    assert admission_window_blocks("hisparse", "vllm-0.32", 32768, 20000, 64) == 313  # cdiv
    assert admission_window_blocks("hisparse", "vllm-0.32", 32768, 142000, 64) == 1024
    assert admission_window_blocks("hisparse", "constant-miss", 32768, 40000, 64) is None
    assert admission_window_blocks("offload", "vllm-0.32", 32768, 40000, 64) is None


def test_a_pool_below_the_window_is_refused_not_left_waiting():
    with pytest.raises(EngineRefused, match="To serve at least one request"):
        setup(13700, "vllm-0.32")
    constant = setup(13700, "constant-miss")
    assert constant.pool_units == 13700
    assert constant.policy_args["latent_units"] + constant.policy_args["indexer_units"] == 17


def test_a_pool_that_holds_the_window_starts_and_admits():
    engine = setup(13800, "vllm-0.32")
    assert engine.policy_args["latent_units"] + engine.policy_args["indexer_units"] == 22
    residency = engine.build().residency
    assert isinstance(residency, HiSparseResidency) and residency.window_blocks == 625
