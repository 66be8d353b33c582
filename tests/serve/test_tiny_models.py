"""Tiny model specs, cache keys and CLI wiring (no build venv needed; see test_tiny_models_e2e)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import cli
from harness.errors import BuildError, ConfigError
from harness.serve.tiny import MODEL_NAMES, resolve_model
from harness.serve.tiny.models import (
    BUILD_SCRIPT,
    MODEL_SPECS,
    build_model,
    model_cache_key,
    model_spec,
)


def test_required_models_exist_with_the_mla_latent_size() -> None:
    assert {"tiny-llama", "tiny-dsv3-mtp"} <= set(MODEL_NAMES)
    params = MODEL_SPECS["tiny-dsv3-mtp"]["params"]
    assert params["kv_lora_rank"] + params["qk_rope_head_dim"] == 576
    assert params["residual_scale"] == 0.0
    assert params["mtp"] == {"eh_proj": "identity"}
    assert MODEL_SPECS["tiny-llama"]["architecture"] == "LlamaForCausalLM"


def test_build_script_imports_nothing_from_harness() -> None:
    tree = ast.parse(BUILD_SCRIPT.read_text())
    modules = [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    ]
    modules += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert modules and not [m for m in modules if m.split(".")[0] == "harness"]


def test_cache_key_depends_on_name_tokenizer_and_build_python(tmp_path: Path, monkeypatch) -> None:
    from harness.dataset.tiny.tokenizer import TOKENIZER_FILES

    tok = tmp_path / "tok"
    tok.mkdir()
    for name in TOKENIZER_FILES:
        (tok / name).write_text(name)
    python = Path("/opt/build-a/bin/python")
    key = model_cache_key("tiny-llama", tok, python)
    assert key == model_cache_key("tiny-llama", tok, python)
    assert key != model_cache_key("tiny-qwen2", tok, python)
    assert key != model_cache_key("tiny-llama", tok, Path("/opt/build-b/bin/python"))
    (tok / "tokenizer.json").write_text("changed")
    assert key != model_cache_key("tiny-llama", tok, python)


def test_unknown_model_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match="tiny-nope"):
        model_spec("tiny-nope")
    with pytest.raises(ConfigError, match="tiny-nope"):
        resolve_model("tiny:tiny-nope", Path("/nonexistent/python"))


def test_non_tiny_specs_pass_through_unchanged() -> None:
    assert resolve_model("zai-org/GLM-5.3-FP8", Path("/nonexistent")) == "zai-org/GLM-5.3-FP8"
    assert resolve_model("/models/glm", Path("/nonexistent")) == "/models/glm"


def test_missing_build_python_is_a_build_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("REPRO_CACHE", str(tmp_path / "cache"))
    with pytest.raises(BuildError, match="does not exist"):
        build_model("tiny-llama", tmp_path / "no-python", tmp_path / "out")


def test_failing_build_script_reports_its_output(tmp_path: Path, monkeypatch) -> None:
    # A real interpreter without torch (the harness venv's) makes the script fail for real.
    import sys

    monkeypatch.setenv("REPRO_CACHE", str(tmp_path / "cache"))
    with pytest.raises(BuildError, match="torch"):
        build_model("tiny-llama", Path(sys.executable), tmp_path / "out", tok_dir=tmp_path)


def test_cli_model_list_and_unknown_name() -> None:
    runner = CliRunner()
    listed = runner.invoke(cli, ["model", "list"])
    assert listed.exit_code == 0, listed.output
    for name in MODEL_NAMES:
        assert name in listed.output
    bad = runner.invoke(cli, ["model", "build", "tiny-nope"])
    assert bad.exit_code != 0
    assert isinstance(bad.exception, ConfigError)
    assert "tiny-nope" in str(bad.exception)
    helped = runner.invoke(cli, ["model", "build", "--help"])
    assert "--build" in helped.output and "--out" in helped.output
