"""Strict validation of model files (pydantic), run only when a file's validated copy is stale.

Kept apart from `model.py` so that `repro capacity` does not pay pydantic's import and schema
construction on every call: a validated file is cached (by content hash) as plain JSON.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.config import parse_yaml, require_mapping, validate
from harness.errors import ConfigError

KvDtype = Literal["fp8", "bf16"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Architecture(_Strict):
    num_layers: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    kv_lora_rank: int = Field(gt=0)
    qk_rope_head_dim: int = Field(ge=0)
    index_topk: int = Field(gt=0)
    index_head_dim: int = Field(gt=0)
    index_n_heads: int = Field(gt=0)
    indexer_full_layers: int = Field(gt=0)  # layers that store their own indexer keys
    n_routed_experts: int = Field(gt=0)


class Weights(_Strict):
    shared_gib: float = Field(gt=0)  # sharded by TP
    routed_experts_gib: float = Field(gt=0)  # sharded by DP x TP with EP, by TP without


class KvLayout(_Strict):
    """Bytes of one block in each pool, for one KV dtype (per GPU: MLA KV is replicated by TP)."""

    baseline_block_bytes: int = Field(gt=0)  # latent + indexer, GPU-resident vLLM
    hisparse_block_bytes: int = Field(gt=0)  # one page of HiSparse's shared GPU pool
    host_block_bytes: int = Field(gt=0)  # latent only, HiSparse host pool
    # Optional decomposition; when given, the block sizes above are checked against it.
    latent_bytes_per_token_layer: int | None = Field(default=None, gt=0)
    indexer_bytes_per_token_layer: int | None = Field(default=None, gt=0)


class BlockTokens(_Strict):
    baseline: int = Field(gt=0)
    gpu: int = Field(gt=0)
    host: int = Field(gt=0)


class Parallelism(_Strict):
    tp_sizes: list[int] = Field(min_length=1)
    dp_sizes: list[int] = Field(min_length=1)


class ModelFile(_Strict):
    name: str
    display_name: str
    description: str = ""
    hub_ids: list[str] = Field(default_factory=list)  # matched against a run's profile model
    architecture: Architecture
    weights: Weights
    gpu_memory_utilization: float = Field(gt=0, le=1)
    runtime_reserve_gib: float = Field(ge=0)
    block_tokens: BlockTokens
    kv_layouts: dict[KvDtype, KvLayout]
    hot_groups: int = Field(gt=0)
    retained_pages_per_group: int = Field(ge=0)
    other_gpu_blocks: int = Field(ge=0)
    indexer_pages_per_block: int = Field(default=1, gt=0)  # GPU pages per block of indexer history
    default_hot_rows: int = Field(gt=0)
    calculator_max_seqs: int = Field(gt=0)
    parallelism: Parallelism
    sources: dict[str, str]

    @model_validator(mode="after")
    def _check(self) -> ModelFile:
        for dtype in ("fp8", "bf16"):
            if dtype not in self.kv_layouts:
                raise ValueError(f"kv_layouts: missing the {dtype!r} layout")
        return self


def _numeric_paths(data: Any, prefix: str = "") -> list[str]:
    """Dotted paths of every number in the raw file (lists count as one path)."""
    if isinstance(data, bool):
        return []
    if isinstance(data, int | float):
        return [prefix]
    if isinstance(data, list):
        return [prefix] if any(isinstance(x, int | float) for x in data) else []
    if isinstance(data, dict):
        out: list[str] = []
        for key, value in data.items():
            if key == "sources":
                continue
            out.extend(_numeric_paths(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return []


def _all_paths(data: Any, prefix: str = "") -> set[str]:
    paths: set[str] = set()
    if isinstance(data, dict):
        for key, value in data.items():
            if key == "sources" and not prefix:
                continue
            path = f"{prefix}.{key}" if prefix else str(key)
            paths.add(path)
            paths |= _all_paths(value, path)
    return paths


def _check_sources(path: Path, raw: dict[str, Any]) -> None:
    sources = raw.get("sources")
    if not isinstance(sources, dict):
        raise ConfigError(f"{path}: key 'sources': a mapping from each numeric key to its source")
    known = _all_paths(raw)
    for key, text in sources.items():
        if key not in known:
            raise ConfigError(f"{path}: key 'sources.{key}': no such key in the model file")
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(f"{path}: key 'sources.{key}': must be a non-empty string")
    for number in _numeric_paths(raw):
        parts = number.split(".")
        covered = any(".".join(parts[:i]) in sources for i in range(1, len(parts) + 1))
        if not covered:
            raise ConfigError(
                f"{path}: key {number!r} has no entry in 'sources' (state its origin)"
            )


def _check_decomposition(path: Path, spec: ModelFile) -> None:
    arch, tokens = spec.architecture, spec.block_tokens
    for dtype, layout in spec.kv_layouts.items():
        where = f"{path}: key 'kv_layouts.{dtype}"
        latent = layout.latent_bytes_per_token_layer
        if latent is not None:
            host = tokens.host * arch.num_layers * latent
            if host != layout.host_block_bytes:
                raise ConfigError(
                    f"{where}.host_block_bytes': {layout.host_block_bytes:,} but "
                    f"{tokens.host} tokens x {arch.num_layers} layers x {latent} B = {host:,}"
                )
            indexer = layout.indexer_bytes_per_token_layer
            if indexer is not None:
                baseline = (
                    tokens.baseline * arch.num_layers * latent
                    + tokens.baseline * arch.indexer_full_layers * indexer
                )
                if baseline != layout.baseline_block_bytes:
                    raise ConfigError(
                        f"{where}.baseline_block_bytes': {layout.baseline_block_bytes:,} but "
                        f"{tokens.baseline} x ({arch.num_layers} x {latent} + "
                        f"{arch.indexer_full_layers} x {indexer}) B = {baseline:,}"
                    )


def validate_model_file(path: Path, content: bytes | str) -> dict[str, Any]:
    """The file's content, validated and normalised; ConfigError naming the file and key."""
    raw = parse_yaml(content, path)
    spec = validate(ModelFile, require_mapping(raw, path, "capacity model file"), path)
    _check_sources(path, raw)
    _check_decomposition(path, spec)
    return spec.model_dump(mode="json")
