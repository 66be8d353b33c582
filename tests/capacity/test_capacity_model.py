"""Model files: strict schema, every number sourced, block sizes consistent with their parts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.capacity.formulas import evaluate, make_deployment
from harness.capacity.model import find_model_for, load_model, load_model_file, model_files
from harness.errors import ConfigError


def test_shipped_models_load() -> None:
    assert {"glm-5.3", "deepseek-v3.2"} <= set(model_files())
    glm = load_model("glm-5.3")
    # host = 64 x 78 x 576 = 2,875,392; baseline = host + 64 x 21 x 132 = 2,875,392 + 177,408
    assert glm.layout("fp8").host_block_bytes == 64 * 78 * 576 == 2875392
    assert glm.layout("fp8").baseline_block_bytes == 2875392 + 64 * 21 * 132 == 3052800
    assert glm.layout("bf16").host_block_bytes == 64 * 78 * 1152 == 5750784
    assert glm.layout("bf16").baseline_block_bytes == 5750784 + 177408 == 5928192
    ds = load_model("deepseek-v3.2")
    assert ds.architecture.num_layers == 61 and ds.architecture.indexer_full_layers == 61
    # one 64-token block of 61 layers' indexer keys = 64 x 61 x 132 = 515,328 B = 3 GPU pages
    assert -(-64 * 61 * 132 // ds.layout("fp8").hisparse_block_bytes) == ds.indexer_pages_per_block


def test_find_model_for_profile_ids() -> None:
    assert find_model_for("zai-org/GLM-5.3").name == "glm-5.3"  # type: ignore[union-attr]
    assert find_model_for("/models/GLM-5.3-FP8").name == "glm-5.3"  # type: ignore[union-attr]
    assert find_model_for("deepseek-ai/DeepSeek-V3.2-Exp").name == "deepseek-v3.2"  # type: ignore[union-attr]
    assert find_model_for("tiny:tiny-llama") is None


def test_deepseek_numbers_plug_in() -> None:
    dep = make_deployment("deepseek-v3.2", gpu="h200", tp=8)
    # weights = 18.591/8 + 609.149/8 = 78.4675; KV = toFixed(120.8112 - 78.4675 - 15, 1) = 27.3
    assert dep.weights_gib_per_gpu == pytest.approx(78.4675)
    assert dep.kv_gib_per_gpu == 27.3
    result = evaluate(dep, 131072)
    lim = result.default.limits
    # baseline: floor(27.3 x 2^30 / 3,076,352) = 9528; ceil(131072/64) = 2048 -> 4
    assert lim.baseline_pool == 9528 and lim.baseline_limit == 4
    # HiSparse: indexer 3 x 2048 = 6144 pages + 16 x 64 hot + 16 x 2 retained = 7200 per request;
    # floor(27.3 x 2^30 / 184,320) = floor(159034.03) = 159034 -> 159034 // 7200 = 22
    assert lim.hisparse_gpu_per_request == 7200
    assert lim.gpu_pool == 159034 and result.default.hisparse_requests == 22


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _glm_raw() -> dict:
    return yaml.safe_load(Path(load_model("glm-5.3").source_file).read_text())  # type: ignore[arg-type]


def test_unknown_key_names_file_and_key(tmp_path: Path) -> None:
    raw = _glm_raw()
    raw["architecture"]["num_layer"] = 78
    path = _write(tmp_path, raw)
    with pytest.raises(ConfigError, match=r"m\.yaml: key 'architecture\.num_layer'"):
        load_model_file(path)


def test_number_without_source_is_rejected(tmp_path: Path) -> None:
    raw = _glm_raw()
    del raw["sources"]["hot_groups"]
    with pytest.raises(ConfigError, match="'hot_groups' has no entry in 'sources'"):
        load_model_file(_write(tmp_path, raw))


def test_source_for_missing_key_is_rejected(tmp_path: Path) -> None:
    raw = _glm_raw()
    raw["sources"]["architecture.experts"] = "somewhere"
    with pytest.raises(ConfigError, match="sources.architecture.experts"):
        load_model_file(_write(tmp_path, raw))


def test_inconsistent_block_bytes_are_rejected(tmp_path: Path) -> None:
    raw = _glm_raw()
    raw["kv_layouts"]["fp8"]["host_block_bytes"] = 2875000
    with pytest.raises(ConfigError, match=r"kv_layouts\.fp8\.host_block_bytes.*2,875,392"):
        load_model_file(_write(tmp_path, raw))


def test_tp_must_divide_heads(tmp_path: Path) -> None:
    raw = _glm_raw()
    raw["architecture"]["num_attention_heads"] = 12
    spec = load_model_file(_write(tmp_path, raw))
    with pytest.raises(ConfigError, match="does not divide num_attention_heads 12"):
        make_deployment(spec, tp=8)
    make_deployment(spec, tp=4, gpu="b300")  # 4 divides 12 (and fits a 288 GB GPU)


def test_unknown_model_name() -> None:
    with pytest.raises(ConfigError, match="unknown capacity model 'glm-9'"):
        load_model("glm-9")


def test_validated_copy_is_cached_and_skips_pydantic(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("REPRO_CACHE", str(tmp_path / "cache"))
    model = Path(load_model("glm-5.3").source_file)  # type: ignore[arg-type]
    first = load_model_file(model)
    entries = list((tmp_path / "cache" / "capacity-models").glob("*.json"))
    assert len(entries) == 1
    assert load_model_file(model) == first  # from the cache
    entries[0].write_text("{not json", encoding="utf-8")  # damaged: validated again
    assert load_model_file(model) == first
    # A fresh process with a warm cache never imports pydantic for the calculator path.
    code = (
        "import sys; from harness.capacity.formulas import make_deployment, evaluate; "
        "evaluate(make_deployment(), 142000); print('pydantic' in sys.modules)"
    )
    env = {**os.environ, "REPRO_CACHE": str(tmp_path / "cache")}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == "False"
