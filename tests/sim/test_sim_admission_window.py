"""HiSparse under the vLLM 0.32 residency reserves a resident admission window per request:
min(max-num-batched-tokens, max-model-len) / 64 GPU blocks of latent + indexer pages. With the
blog profile's 32,768 batched tokens and a 40,000-token limit that is 512 blocks x 17 pages =
8,704 pages. A pool smaller than that could never admit a long request (the simulator used to
wait forever), so the engine refuses to start, in vLLM's words; under the constant-miss model
the same pool starts (its need is the host-resident one: indexer pages plus a hot region)."""

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
    assert admission_window_blocks("hisparse", "vllm-0.32", 32768, 40000, 64) == 512
    assert admission_window_blocks("hisparse", "vllm-0.32", 32768, 20000, 64) == 313  # cdiv
    assert admission_window_blocks("hisparse", "constant-miss", 32768, 40000, 64) is None
    assert admission_window_blocks("offload", "vllm-0.32", 32768, 40000, 64) is None


def test_a_pool_below_the_window_is_refused_not_left_waiting():
    with pytest.raises(EngineRefused, match="To serve at least one request"):
        setup(4500, "vllm-0.32")
    assert setup(4500, "constant-miss").pool_units == 4500


def test_a_pool_that_holds_the_window_starts_and_admits():
    engine = setup(8800, "vllm-0.32")
    assert engine.policy_args["latent_units"] + engine.policy_args["indexer_units"] == 17
    residency = engine.build().residency
    assert isinstance(residency, HiSparseResidency) and residency.window_blocks == 512
