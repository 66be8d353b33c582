"""Tiny models built with the real CPU build venv: determinism, config, the MTP bigram property."""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
from pathlib import Path

import pytest

from harness.dataset.tiny.tokenizer import TOKENIZER_FILES
from harness.serve.tiny import ensure_model, resolve_model
from harness.serve.tiny.models import MODEL_FILES, build_model


def file_hashes(directory: Path) -> dict[str, str]:
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.iterdir())
        if path.is_file() and not path.name.startswith(".")
    }


def safetensors_header(path: Path) -> dict:
    """Tensor names, dtypes and shapes, read without torch (the harness venv has none)."""
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    header.pop("__metadata__", None)
    return header


@pytest.fixture(scope="session")
def mtp_model(cpu_build) -> Path:
    return ensure_model("tiny-dsv3-mtp", cpu_build.python)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-dsv3-mtp"])
def test_rebuild_is_byte_identical(cpu_build, name: str, tmp_path: Path) -> None:
    cached = ensure_model(name, cpu_build.python)
    fresh = build_model(name, cpu_build.python, tmp_path / name)
    cached_hashes = file_hashes(cached)
    assert "model.safetensors" in cached_hashes and "tokenizer.json" in cached_hashes
    assert file_hashes(fresh) == cached_hashes
    assert sorted(p.name for p in fresh.iterdir()) == sorted((*MODEL_FILES, *TOKENIZER_FILES))
    # Cached: a second ensure returns the same directory without rebuilding.
    assert ensure_model(name, cpu_build.python) == cached
    assert resolve_model(f"tiny:{name}", cpu_build.python) == str(cached)
    assert resolve_model("org/model", cpu_build.python) == "org/model"


def test_llama_config_and_weights(cpu_build) -> None:
    model = ensure_model("tiny-llama", cpu_build.python)
    config = json.loads((model / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]) == (
        256,
        2,
        2048,
    )
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (0, 2, 3)
    assert config["tie_word_embeddings"] is False
    generation = json.loads((model / "generation_config.json").read_text())
    assert generation["eos_token_id"] == 2
    header = safetensors_header(model / "model.safetensors")
    assert {t["dtype"] for t in header.values()} == {"BF16"}
    params = sum(_numel(t["shape"]) for t in header.values())
    assert params == 2_229_504


def _numel(shape: list[int]) -> int:
    total = 1
    for dim in shape:
        total *= dim
    return total


def test_dsv3_mtp_config_and_checkpoint_layout(mtp_model: Path) -> None:
    config = json.loads((mtp_model / "config.json").read_text())
    assert config["architectures"] == ["DeepseekV3ForCausalLM"]
    # CPU_MLA supports exactly one latent size: 576.
    assert config["kv_lora_rank"] + config["qk_rope_head_dim"] == 576
    assert config["topk_method"] == "noaux_tc"
    assert config["scoring_func"] == "sigmoid"
    assert config["num_nextn_predict_layers"] == 1
    layers = config["num_hidden_layers"]
    header = safetensors_header(mtp_model / "model.safetensors")
    mtp = f"model.layers.{layers}."
    for suffix in (
        "enorm.weight",
        "hnorm.weight",
        "eh_proj.weight",
        "shared_head.norm.weight",
        "shared_head.head.weight",
        "embed_tokens.weight",
        "mlp.gate.e_score_correction_bias",
        "mlp.experts.0.down_proj.weight",
        "self_attn.kv_a_proj_with_mqa.weight",
    ):
        assert mtp + suffix in header, suffix
    hidden = config["hidden_size"]
    assert header[mtp + "eh_proj.weight"]["shape"] == [hidden, 2 * hidden]
    assert header[mtp + "self_attn.kv_a_proj_with_mqa.weight"]["shape"] == [576, hidden]
    assert not any(f"model.layers.{layers + 1}." in key for key in header)


# Runs under the build venv's python: transformers' DeepseekV3 runs the target; the MTP layer is
# evaluated as vLLM's DeepSeek MTP does it (enorm/hnorm -> eh_proj -> decoder block -> residual ->
# shared_head), with the decoder block loaded by transformers as an extra layer.
MTP_CHECK = r"""
import json, sys, torch
from transformers import AutoModelForCausalLM
from safetensors import safe_open

model_dir = sys.argv[1]
torch.manual_seed(0)
target = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                              attn_implementation="eager").eval()
layers = target.config.num_hidden_layers
with_mtp_block = AutoModelForCausalLM.from_pretrained(
    model_dir, dtype=torch.float32, attn_implementation="eager",
    num_hidden_layers=layers + 1).eval()
block = with_mtp_block.model.layers[layers]
prefix = f"model.layers.{layers}."
with safe_open(f"{model_dir}/model.safetensors", "pt") as handle:
    mtp = {k[len(prefix):]: handle.get_tensor(k).float() for k in handle.keys()
           if k.startswith(prefix)}

def rms(x, weight):
    eps = target.config.rms_norm_eps
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

prompt = torch.tensor([[1, 900, 17, 345, 1200, 77, 5, 1999, 42, 610]])
with torch.no_grad():
    out = target.generate(prompt, max_new_tokens=24, do_sample=False,
                          eos_token_id=None, pad_token_id=3)
    seq = out[:, :]
    result = target(seq, output_hidden_states=True)
    greedy = result.logits.argmax(-1)[0]            # greedy[j] = next token after seq[:j+1]
    hidden = result.hidden_states[-1]               # target's final hidden states
    n = seq.shape[1]
    embeds = target.model.embed_tokens(seq[:, 1:])  # token just predicted, at positions 0..n-2
    x = torch.cat([rms(embeds, mtp["enorm.weight"]), rms(hidden[:, :-1], mtp["hnorm.weight"])],
                  dim=-1) @ mtp["eh_proj.weight"].T
    positions = torch.arange(n - 1)[None]
    cos_sin = with_mtp_block.model.rotary_emb(x, positions)
    mask = torch.full((n - 1, n - 1), float("-inf")).triu(1)[None, None]
    out_block = block(x, attention_mask=mask, position_ids=positions,
                      position_embeddings=cos_sin)
    out_block = out_block[0] if isinstance(out_block, tuple) else out_block
    logits = rms(out_block, mtp["shared_head.norm.weight"]) @ mtp["shared_head.head.weight"].T
    drafts = logits.argmax(-1)[0]                   # draft for the token after seq[i+1]
generated = seq[0, prompt.shape[1]:].tolist()
agree = int((drafts == greedy[1:]).sum())
print(json.dumps({"agree": agree, "total": n - 1, "generated": generated,
                  "distinct_generated": len(set(generated))}))
"""


def test_mtp_head_predicts_the_targets_next_greedy_token(
    cpu_build, mtp_model: Path, tmp_path: Path
) -> None:
    script = tmp_path / "mtp_check.py"
    script.write_text(MTP_CHECK)
    env = {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "PATH": "/usr/bin:/bin",
    }
    proc = subprocess.run(
        [str(cpu_build.python), str(script), str(mtp_model)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(report["generated"]) == 24
    assert report["distinct_generated"] > 1  # not a degenerate constant output
    assert report["agree"] == report["total"], report
