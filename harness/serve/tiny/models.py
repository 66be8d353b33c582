"""Tiny random-weight models for the CPU profiles, built with a build venv's python.

The harness venv has no torch, so the weights are made by `build_model_script.py` run under the
build venv's interpreter. Built models are cached under
`cache_dir()/models/<name>-<hash of (script source, tokenizer files, spec)>/`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from harness import env as harness_env
from harness.dataset.tiny import ensure_tokenizer
from harness.dataset.tiny.cache import ensure_entry
from harness.dataset.tiny.tokenizer import TOKENIZER_FILES, tokenizer_hash
from harness.errors import BuildError, ConfigError
from harness.paths import cache_dir

BUILD_SCRIPT = Path(__file__).with_name("build_model_script.py")
BUILD_TIMEOUT_S = 600

_COMMON: dict[str, Any] = {
    "num_hidden_layers": 2,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000,
    "vocab_multiple": 64,
}
_DENSE: dict[str, Any] = {
    **_COMMON,
    "head_dim": 64,
    "num_key_value_heads": 2,
    "intermediate_size": 512,
}
# MLA latent 512 + rope 64 = 576: the only head size vLLM's CPU_MLA backend supports.
_MLA_MOE: dict[str, Any] = {
    **_COMMON,
    "intermediate_size": 512,
    "q_lora_rank": 128,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 64,
    "v_head_dim": 64,
    "first_k_dense_replace": 1,
    "n_routed_experts": 4,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 128,
}

MODEL_SPECS: dict[str, dict[str, Any]] = {
    "tiny-llama": {"architecture": "LlamaForCausalLM", "params": _DENSE},
    "tiny-qwen2": {"architecture": "Qwen2ForCausalLM", "params": _DENSE},
    "tiny-dsv3": {"architecture": "DeepseekV3ForCausalLM", "params": _MLA_MOE},
    # The "bigram" MTP model: residual scale 0 silences every attention/MLP output, so the
    # target is a pure last-token -> next-token map; an identity eh_proj makes the MTP head
    # apply that same map to the token just predicted, so greedy drafts are always accepted.
    "tiny-dsv3-mtp": {
        "architecture": "DeepseekV3ForCausalLM",
        "params": {**_MLA_MOE, "residual_scale": 0.0, "mtp": {"eh_proj": "identity"}},
    },
}
MODEL_NAMES: tuple[str, ...] = tuple(MODEL_SPECS)
MODEL_FILES = ("model.safetensors", "config.json", "generation_config.json", "repro_model.json")


def model_spec(name: str) -> dict[str, Any]:
    if name not in MODEL_SPECS:
        raise ConfigError(f"unknown tiny model {name!r}; known: {', '.join(MODEL_NAMES)}")
    return {"name": name, **MODEL_SPECS[name]}


def model_cache_key(name: str, tok_dir: Path, python: Path) -> str:
    """Hash of the inputs: script, tokenizer files, spec, and which build venv runs the script
    (its torch/transformers versions could change the bytes)."""
    digest = hashlib.sha256()
    digest.update(os.path.abspath(python).encode() + b"\0")
    digest.update(BUILD_SCRIPT.read_bytes())
    digest.update(tokenizer_hash(tok_dir).encode())
    digest.update(json.dumps(model_spec(name), sort_keys=True).encode())
    return digest.hexdigest()[:16]


def build_model(name: str, python: Path, out_dir: Path, *, tok_dir: Path | None = None) -> Path:
    """Build model `name` into out_dir (created) with the build venv's `python`; returns out_dir.

    Files: model.safetensors (bf16), config.json, generation_config.json, the tokenizer files,
    repro_model.json (provenance).
    """
    spec = model_spec(name)
    python = Path(python)
    if not python.exists():
        raise BuildError(f"build python {python} does not exist")
    tok_dir = tok_dir or ensure_tokenizer()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    spec_path = out_dir / ".spec.json"
    spec_path.write_text(json.dumps(spec, sort_keys=True, indent=2))
    env = {
        **harness_env.for_child(),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONHASHSEED": "0",
        # One thread: the same float ops in the same order on every machine.
        "OMP_NUM_THREADS": "1",
    }
    command = [
        str(python),
        str(BUILD_SCRIPT),
        "--spec",
        str(spec_path),
        "--tokenizer",
        str(tok_dir),
        "--out",
        str(out_dir),
    ]
    try:
        result = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise BuildError(f"building tiny model {name} timed out after {BUILD_TIMEOUT_S}s") from exc
    finally:
        spec_path.unlink(missing_ok=True)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
        raise BuildError(f"building tiny model {name} with {python} failed:\n{tail}")
    for file_name in TOKENIZER_FILES:  # the model directory carries its tokenizer, as on a hub
        shutil.copyfile(tok_dir / file_name, out_dir / file_name)
        (out_dir / file_name).chmod(0o644)
    missing = [f for f in (*MODEL_FILES, *TOKENIZER_FILES) if not (out_dir / f).is_file()]
    if missing:
        raise BuildError(f"tiny model {name} build left no {', '.join(missing)} in {out_dir}")
    return out_dir


def ensure_model(name: str, python: Path) -> Path:
    """The cached directory of tiny model `name`, built on first use with `python`."""
    model_spec(name)
    tok_dir = ensure_tokenizer()
    entry = cache_dir() / "models" / f"{name}-{model_cache_key(name, tok_dir, python)}"
    entry.parent.mkdir(parents=True, exist_ok=True)
    return ensure_entry(entry, lambda tmp: build_model(name, python, tmp, tok_dir=tok_dir))
