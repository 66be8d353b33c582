"""Build one tiny random-weight model. Runs under a BUILD venv's python (torch + transformers).

Standalone on purpose: it is executed as a file path by another interpreter, so it imports
nothing from `harness`. Usage:

    python build_model_script.py --spec SPEC.json --tokenizer TOK_DIR --out OUT_DIR

SPEC.json holds {"name": ..., "architecture": ..., "params": {...}} (see harness/serve/tiny/models.py).
Same spec + tokenizer + torch/transformers versions -> byte-identical files: weights come from
torch.manual_seed(0) in float32, are cast to bfloat16 and written with sorted tensor names; JSON
files are written with sorted keys.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from safetensors import safe_open
from safetensors.torch import save_file


def dump_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def round_up(value: int, multiple: int) -> int:
    return (value + multiple - 1) // multiple * multiple


def special_ids(tok_dir: Path) -> dict[str, int]:
    info = json.loads((tok_dir / "repro_tokenizer.json").read_text())
    return {key: info[key] for key in ("bos_token_id", "eos_token_id", "pad_token_id")}


def tokenizer_vocab_size(tok_dir: Path) -> int:
    return json.loads((tok_dir / "repro_tokenizer.json").read_text())["vocab_size_trained"]


def make_config(architecture: str, params: dict, vocab_size: int, ids: dict[str, int]):
    import transformers

    common = {
        "vocab_size": vocab_size,
        "hidden_size": params["hidden_size"],
        "num_hidden_layers": params["num_hidden_layers"],
        "num_attention_heads": params["num_attention_heads"],
        "max_position_embeddings": params["max_position_embeddings"],
        "rms_norm_eps": params["rms_norm_eps"],
        "tie_word_embeddings": False,
        **ids,
    }
    rope = {"rope_type": "default", "rope_theta": float(params["rope_theta"])}
    config: transformers.PretrainedConfig
    if architecture in ("LlamaForCausalLM", "Qwen2ForCausalLM"):
        config_class = (
            transformers.LlamaConfig
            if architecture == "LlamaForCausalLM"
            else transformers.Qwen2Config
        )
        config = config_class(
            intermediate_size=params["intermediate_size"],
            num_key_value_heads=params["num_key_value_heads"],
            head_dim=params["head_dim"],
            rope_parameters=rope,
            **common,
        )
    elif architecture == "DeepseekV3ForCausalLM":
        config = transformers.DeepseekV3Config(
            intermediate_size=params["intermediate_size"],
            moe_intermediate_size=params["moe_intermediate_size"],
            num_key_value_heads=params["num_attention_heads"],
            q_lora_rank=params["q_lora_rank"],
            kv_lora_rank=params["kv_lora_rank"],
            qk_rope_head_dim=params["qk_rope_head_dim"],
            qk_nope_head_dim=params["qk_nope_head_dim"],
            v_head_dim=params["v_head_dim"],
            n_routed_experts=params["n_routed_experts"],
            n_shared_experts=params["n_shared_experts"],
            num_experts_per_tok=params["num_experts_per_tok"],
            first_k_dense_replace=params["first_k_dense_replace"],
            n_group=1,
            topk_group=1,
            rope_parameters=rope,
            **common,
        )
    else:
        raise SystemExit(f"unsupported architecture {architecture!r}")
    config.architectures = [architecture]
    return config


def random_checkpoint(config, staging: Path) -> dict[str, torch.Tensor]:
    """Seeded random init, saved by transformers so the tensors are in checkpoint layout
    (e.g. per-expert MoE weights rather than transformers 5's fused in-memory experts)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model = model.to(torch.bfloat16)
    model.save_pretrained(staging)
    tensors: dict[str, torch.Tensor] = {}
    for shard in sorted(staging.glob("*.safetensors")):
        with safe_open(str(shard), "pt") as handle:
            for key in handle.keys():  # noqa: SIM118 - safe_open handles are not iterable
                tensors[key] = handle.get_tensor(key)
    return tensors


def is_residual_output(name: str) -> bool:
    """Weights whose output is added to the residual stream (attention and MLP outputs)."""
    return name.endswith(("o_proj.weight", "down_proj.weight"))


def add_mtp_layer(
    tensors: dict[str, torch.Tensor], num_layers: int, hidden: int, eh_proj: str
) -> None:
    """Append DeepSeek's MTP layer at index num_layers, in the layout vLLM's MTP loader reads."""
    last = f"model.layers.{num_layers - 1}."
    mtp = f"model.layers.{num_layers}."
    for key in [k for k in tensors if k.startswith(last)]:
        tensors[mtp + key[len(last) :]] = tensors[key].clone()
    ones = torch.ones(hidden, dtype=torch.bfloat16)
    tensors[mtp + "enorm.weight"] = ones.clone()
    tensors[mtp + "hnorm.weight"] = ones.clone()
    tensors[mtp + "shared_head.norm.weight"] = ones.clone()
    if eh_proj == "identity":
        # Sees only the normalised embedding of the token just predicted: [I, 0].
        weight = torch.cat([torch.eye(hidden), torch.zeros(hidden, hidden)], dim=1)
    elif eh_proj == "random":
        generator = torch.Generator().manual_seed(1)
        weight = torch.randn(hidden, 2 * hidden, generator=generator) * 0.02
    else:
        raise SystemExit(f"unknown eh_proj {eh_proj!r}")
    tensors[mtp + "eh_proj.weight"] = weight.to(torch.bfloat16)
    tensors[mtp + "shared_head.head.weight"] = tensors["lm_head.weight"].clone()
    tensors[mtp + "embed_tokens.weight"] = tensors["model.embed_tokens.weight"].clone()


def config_dict(config, spec: dict) -> dict:
    data = config.to_dict()
    data["dtype"] = "bfloat16"
    data.pop("torch_dtype", None)
    if spec["architecture"] == "DeepseekV3ForCausalLM":
        # transformers' DeepseekV3Config omits these; without noaux_tc vLLM creates no
        # gate.e_score_correction_bias and fails to load the checkpoint.
        data["topk_method"] = "noaux_tc"
        data["scoring_func"] = "sigmoid"
        data["num_nextn_predict_layers"] = 1 if spec["params"].get("mtp") else 0
    return data


def build(spec: dict, tok_dir: Path, out_dir: Path) -> None:
    params = spec["params"]
    ids = special_ids(tok_dir)
    vocab_size = round_up(tokenizer_vocab_size(tok_dir), params["vocab_multiple"])
    config = make_config(spec["architecture"], params, vocab_size, ids)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".staging-", dir=out_dir) as staging:
        tensors = random_checkpoint(config, Path(staging))

    scale = params.get("residual_scale", 1.0)
    if scale != 1.0:
        for key in [k for k in tensors if is_residual_output(k)]:
            tensors[key] = (tensors[key].float() * scale).to(torch.bfloat16)
    mtp = params.get("mtp")
    if mtp:
        add_mtp_layer(tensors, params["num_hidden_layers"], params["hidden_size"], mtp["eh_proj"])

    ordered = {key: tensors[key].contiguous() for key in sorted(tensors)}
    save_file(ordered, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "model.safetensors").chmod(0o644)
    dump_json(out_dir / "config.json", config_dict(config, spec))
    generation = {**ids, "do_sample": False}
    dump_json(out_dir / "generation_config.json", generation)
    import transformers

    provenance = {
        "kind": "repro-tiny-model",
        "name": spec["name"],
        "spec": spec,
        "num_parameters": sum(t.numel() for k, t in tensors.items()),
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "python_version": ".".join(map(str, sys.version_info[:3])),
    }
    dump_json(out_dir / "repro_model.json", provenance)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("--tokenizer", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    build(json.loads(args.spec.read_text()), args.tokenizer, args.out)


if __name__ == "__main__":
    main()
