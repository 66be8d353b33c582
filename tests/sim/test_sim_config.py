"""Profile -> engine: what is taken from where, and bad input named precisely."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.capacity.deployment import make_deployment, mtp_hot_rows
from harness.capacity.formulas import capacity_at
from harness.capacity.model import load_model
from harness.errors import ConfigError
from harness.serve.profiles import load_profile
from harness.sim.config import load_calibration, setup_from_profile


def test_pools_come_from_the_capacity_model():
    model = load_model("glm-5.3")
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
        "params: {prefill_eff: 0.05}\n"
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
