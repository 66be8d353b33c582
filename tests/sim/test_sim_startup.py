"""The simulated engine refuses a max-model-len its KV pool cannot hold, as vLLM 0.32.0 does
(`_check_enough_kv_cache_memory`), and the HiSparse arm counts only its GPU-resident pages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.vllm_logs import CPU_REFUSAL

from harness.errors import RunError
from harness.results import load_run
from harness.serve.profiles import load_profile
from harness.sim.config import setup_from_profile
from harness.sim.run import run_simulation
from harness.sim.startup import EngineRefused, KvPool, check_kv_pool

GIB = 2**30


def _refusal(profile: str, overrides: list[str] | None = None) -> str:
    with pytest.raises(EngineRefused) as err:
        setup_from_profile(load_profile(profile, overrides or []))
    assert err.value.exit_code == 1 and profile in str(err.value)
    return err.value.reason


def test_offloading_at_1m_is_refused_with_vllms_message_and_numbers():
    reason = _refusal("offload512-1m")
    # By hand (docs/vllm.md §6.2): a 1,048,576-token request fully resident is
    # 1,048,576 / 64 = 16,384 blocks x 3,052,800 B = 50,017,075,200 B = 46.58 GiB. The pool is
    # 17.8 GiB per GPU; vLLM holds back the null block: 17.8 GiB - 3,052,800 B = 17.797 GiB,
    # shown "17.8". floor(17.8 GiB / 3,052,800 B) = 6,260 blocks, 6,259 usable -> 400,576 tokens.
    assert 16384 * 3052800 == 50017075200 and round(50017075200 / GIB, 2) == 46.58
    assert (17.8 * GIB) // 3052800 == 6260
    assert reason == (
        "To serve at least one request with the model's max seq len (1048576), "
        "(46.58 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(17.8 GiB). Based on the available memory, the estimated maximum model length is "
        "400576. Try increasing `gpu_memory_utilization` (which also controls CPU memory on "
        "the CPU backend) or decreasing `max_model_len` when initializing the engine. "
        "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    )


def test_the_message_is_the_one_real_vllm_printed_for_the_same_pool():
    # vLLM on CPU: 8 blocks of 128 tokens, max-model-len 4096 (tests/support/vllm_logs.py);
    # any block small enough to round to 0.0 GiB gives the same text
    pool = KvPool(8 * 65536, 65536, lambda n: -(-n // 128))
    with pytest.raises(EngineRefused) as err:
        check_kv_pool(pool, 4096)
    assert err.value.reason == CPU_REFUSAL


def test_the_boundary_is_the_pool_minus_the_null_block():
    blocks = ["serve.num-gpu-blocks-override=100"]
    ok = setup_from_profile(load_profile("offload512", [*blocks, "serve.max-model-len=6336"]))
    assert ok.pool_units == 100  # 99 usable x 64 = 6,336 tokens: exactly one request fits
    reason = _refusal("offload512", [*blocks, "serve.max-model-len=6337"])
    assert "max seq len (6337)" in reason
    assert "the estimated maximum model length is 6336." in reason


def test_hisparse_at_1m_needs_only_its_gpu_resident_pages():
    setup = setup_from_profile(load_profile("hisparse384-1m"))
    args = setup.policy_args
    # indexer pages of the whole context + (hot buffers + tail pages): 16,384 + 3,240 pages
    assert args["lease_units"] == 20 * (10240 // 64) + 20 * 2 == 3240
    need_pages = 16384 * args["indexer_units"] + args["lease_units"]
    assert setup.facts["max_model_len_kv_gib"] == round(need_pages * 184320 / GIB, 4)
    assert setup.facts["max_model_len_kv_gib"] < setup.facts["available_kv_gib"]
    # fully resident it would not fit: 16,384 x 17 pages > the 103,692-page pool
    resident = 16384 * (args["latent_units"] + args["indexer_units"])
    assert resident > setup.pool_units == 103692
    # ... and the same check refuses it when the pool is smaller than that need
    tight = [f"serve.num-gpu-blocks-override={need_pages}"]
    assert "max seq len (1048576)" in _refusal("hisparse384-1m", tight)
    fits = [f"serve.num-gpu-blocks-override={need_pages + 1}"]
    assert setup_from_profile(load_profile("hisparse384-1m", fits)).pool_units == need_pages + 1


def test_a_host_pool_smaller_than_one_request_is_refused():
    # 40 GiB / 2,875,392 B = 14,936 host blocks < 1,048,576 / 64 + 2 = 16,386
    prof = load_profile("hisparse384-1m")
    prof.serve["attention-config"] = {"hisparse_config": {"host_pool_gib": 40}}
    with pytest.raises(EngineRefused) as err:
        setup_from_profile(prof)
    assert err.value.reason == (
        "HiSparse host pool has 14936 blocks but max_model_len needs 16386; increase host_pool_gib."
    )


@pytest.fixture(scope="module")
def recipe_1m(tmp_path_factory) -> Path:
    """Three ~1M-token conversations, two turns each (token counts only: no build)."""
    path = tmp_path_factory.mktemp("ds") / "one-m.yaml"
    path.write_text(
        "number: 3\nnum_turns: 2\nfirst_turn_length: 1000000\nsubsequent_turn_length: 500\n"
    )
    return path


SMALL = ["sweep.points=[[1,1],[2,2]]"]


def test_hisparse_serves_1m_conversations_offline(recipe_1m, tmp_path):
    run = load_run(
        run_simulation(
            "hisparse384-1m", dataset=str(recipe_1m), overrides=SMALL, out=tmp_path, run_id="hs"
        )
    )
    assert run.manifest.status == "complete" and run.manifest.start_failure is None
    assert [p.label for p in run.points] == ["c1", "c2"]
    for point in run.points:
        assert point.valid, point.invalid_reasons
        c = point.client
        assert c.failed_requests == 0 and c.success_requests == c.total_requests == point.number * 2
        assert c.avg_input_tokens > 1_000_000
    assert run.points[1].metrics["occupancy"] > 1.0  # both 1M requests were resident at once


def test_a_refused_simulation_records_a_failed_run_and_never_overwrites(recipe_1m, tmp_path):
    with pytest.raises(EngineRefused, match="recorded in"):
        run_simulation(
            "offload512-1m", dataset=str(recipe_1m), overrides=SMALL, out=tmp_path, run_id="off"
        )
    run = load_run(tmp_path / "off")
    assert run.manifest.status == "failed" and not run.points
    failure = run.manifest.start_failure
    assert failure["stage"] == "startup" and failure["exit_code"] == 1
    assert failure["reason"].startswith("To serve at least one request with the model's max seq")
    before = (tmp_path / "off" / "manifest.json").read_text()
    with pytest.raises(RunError, match="already exists"):
        run_simulation("offload512-1m", dataset=str(recipe_1m), out=tmp_path, run_id="off")
    assert json.loads((tmp_path / "off" / "manifest.json").read_text()) == json.loads(before)
