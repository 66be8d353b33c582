"""Profile -> engine: what is taken from where, and bad input named precisely."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.capacity.deployment import make_deployment, mtp_hot_rows
from harness.capacity.formulas import capacity_at
from harness.capacity.model import load_model
from harness.errors import ConfigError
from harness.serve.profiles import load_profile
from harness.sim.config import (
    UNCALIBRATED,
    calibration_label,
    find_calibration,
    load_calibration,
    resolve_calibration,
    setup_from_profile,
)
from harness.sim.facts import COMPUTE
from harness.sim.pool import derived_kv_gib, mtp_kv_gib

GIB = 2**30


def test_the_pool_per_mtp_mode_by_hand():
    model, cf = load_model("glm-5.3"), COMPUTE["glm-5.3"]
    # without MTP the module's 9.93 B FP8 parameters / 8 ranks = 1.156 GiB are free for KV
    assert mtp_kv_gib(model, "fp8", 20.0, 0, cf, 8) == pytest.approx(20.0 + 1.15601, abs=1e-4)
    # with MTP every block carries a 79th latent layer (576 B) and a 22nd indexer key (132 B):
    # 47,700 B -> 48,408 B per token, so 20 GiB hold as many blocks as 19.7075 GiB did
    assert mtp_kv_gib(model, "fp8", 20.0, 3, cf, 8) == pytest.approx(20.0 * 47700 / 48408)
    # a calibrated run derives its pool per MTP mode from the fitted runtime reserve
    # (tests/sim/test_sim_pool.py checks the derivation by hand)
    cal = resolve_calibration(None, "zai-org/GLM-5.3")
    nomtp = setup_from_profile(load_profile("offload512-nomtp"), cal)
    mtp = setup_from_profile(load_profile("offload512"), cal)
    dep = make_deployment(model, gpu="h200", tp=8)
    runtime = cal.params["runtime_gib"]
    assert mtp.facts["kv_gib_per_gpu"] == pytest.approx(derived_kv_gib(dep, runtime, 3, cf))
    assert nomtp.facts["kv_gib_per_gpu"] == pytest.approx(derived_kv_gib(dep, runtime, 0, cf))
    # the module's weights come back without MTP, and the blocks lose the MTP layer
    assert nomtp.facts["kv_gib_per_gpu"] - mtp.facts["kv_gib_per_gpu"] > 9.93e9 / 8 / GIB
    assert nomtp.pool_units > mtp.pool_units


def test_calibrated_by_default_by_model_and_gpu(tmp_path: Path):
    found = find_calibration("glm-5.3", "h200")
    assert found is not None and found.name == "glm53-h200.yaml"
    cal = resolve_calibration(None, "zai-org/GLM-5.3")
    assert cal is not None and cal.path == found
    assert calibration_label(cal) == "calibrated (glm53-h200.yaml)"
    assert resolve_calibration("none", "zai-org/GLM-5.3") is None  # explicit roofline defaults
    assert resolve_calibration(None, "zai-org/GLM-5.3", gpu="b200") is None  # no B200 fit
    assert calibration_label(None) == UNCALIBRATED and "uncalibrated" in UNCALIBRATED
    assert find_calibration("glm-5.3", "h200", tmp_path) is None


def test_pools_come_from_the_capacity_model():
    model = load_model("glm-5.3")
    # uncalibrated: the calculator's 17.8 GiB, as `repro capacity` gives it
    dep = make_deployment(model, tp=8, max_seqs=256, spec_tokens=3)
    lim = capacity_at(dep, 64, mtp_hot_rows(3, model.architecture.index_topk))
    hs = setup_from_profile(load_profile("hisparse384"))
    off = setup_from_profile(load_profile("offload512"))
    assert hs.policy == "hisparse" and hs.pool_units == lim.gpu_pool
    assert hs.policy_args["lease_units"] == lim.hot_per_request + lim.resident_per_request
    assert off.policy == "offload" and off.pool_units == lim.baseline_pool
    # 512 GiB per engine, split over 8 TP workers, in whole baseline blocks
    assert off.policy_args["cpu_blocks"] == 549755813888 // 8 // dep.baseline_block_bytes
    assert (
        hs.spec_tokens == 3
        and setup_from_profile(load_profile("offload512-nomtp")).spec_tokens == 0
    )


def test_num_gpu_blocks_override_sizes_the_pool():
    # 1,233 usable blocks hold 78,912 tokens: a 142,000 max-model-len would be refused
    prof = load_profile(
        "offload512", ["serve.num-gpu-blocks-override=1234", "serve.max-model-len=65536"]
    )
    assert setup_from_profile(prof).pool_units == 1234


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("serve.kv-transfer-config.kv_connector=NixlConnector", "'NixlConnector' is not modelled"),
        ("serve.speculative-config.method=eagle3", "'eagle3' is not modelled"),
        ("serve.enforce-eager=true", "serve.enforce-eager"),
    ],
)
def test_unmodelled_options_are_errors_naming_profile_key_value(override, needle):
    key, _, value = override.partition("=")
    parts = key.split(".")
    if len(parts) > 2:  # nested: build the whole block
        prof = load_profile("hisparse384")
        block = dict(prof.serve[parts[1]])
        block[parts[2]] = value
        prof.serve[parts[1]] = block
    else:
        prof = load_profile("hisparse384", [override])
    with pytest.raises(ConfigError) as err:
        setup_from_profile(prof)
    assert "hisparse384" in str(err.value) and needle in str(err.value)


def test_model_without_model_file_is_an_error():
    with pytest.raises(ConfigError, match="no model file in launch/models"):
        setup_from_profile(load_profile("cpu-tiny"))


def test_calibration_for_another_model_or_gpu_is_refused(tmp_path: Path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "schema: repro.sim-calibration/1\nmodel: deepseek-v3.2\ngpu: h200\n"
        "params: {prefill_eff: 0.2}\n"
    )
    with pytest.raises(ConfigError, match="calibrated for model 'deepseek-v3.2'"):
        setup_from_profile(load_profile("hisparse384"), load_calibration(path))
    path.write_text("schema: repro.sim-calibration/1\nmodel: glm-5.3\ngpu: h200\nparams: {}\n")
    with pytest.raises(ConfigError, match="calibrated for GPU 'h200', not 'b200'"):
        setup_from_profile(load_profile("hisparse384"), load_calibration(path), gpu="b200")
    path.write_text(
        "schema: repro.sim-calibration/1\nmodel: glm-5.3\ngpu: h200\nparams: {prefill_eff: 7}\n"
    )
    with pytest.raises(ConfigError, match="params.prefill_eff: 7 outside"):
        load_calibration(path)
