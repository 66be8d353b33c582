"""Sparse-MLA model descriptions for the capacity calculator (`launch/models/<name>.yaml`).

A model file carries every number the calculator needs (layers, per-token bytes, top-K, weight
sizes, block constants, allowed parallelism) and, in `sources:`, where each number comes from.
Loading is strict: unknown keys, numbers without a source, sources for keys that do not exist,
and block sizes that contradict their stated decomposition are errors naming the file and key.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness.errors import ConfigError
from harness.paths import MODELS_DIR

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


class ModelSpec(_Strict):
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
    source_file: Path | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        for dtype in ("fp8", "bf16"):
            if dtype not in self.kv_layouts:
                raise ValueError(f"kv_layouts: missing the {dtype!r} layout")
        return self

    def layout(self, dtype: KvDtype) -> KvLayout:
        return self.kv_layouts[dtype]


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
            raise ConfigError(f"{path}: key {number!r} has no entry in 'sources' (state its origin)")


def _check_decomposition(path: Path, spec: ModelSpec) -> None:
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


def load_model_file(path: Path) -> ModelSpec:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: model file not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    try:
        spec = ModelSpec.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise ConfigError(f"{path}: key {where!r}: {first['msg']}") from None
    _check_sources(path, raw)
    _check_decomposition(path, spec)
    return spec.model_copy(update={"source_file": path})


def model_files() -> dict[str, Path]:
    return {p.stem: p for p in sorted(MODELS_DIR.glob("*.yaml"))}


@cache
def _load_cached(path: str, mtime: float) -> ModelSpec:
    return load_model_file(Path(path))


def load_model(name_or_path: str) -> ModelSpec:
    """A model by name (`launch/models/<name>.yaml`) or by path to a YAML file."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or candidate.is_file():
        path = candidate
    else:
        files = model_files()
        if name_or_path not in files:
            known = ", ".join(files) or "none"
            raise ConfigError(
                f"unknown capacity model {name_or_path!r} (known: {known}; files in {MODELS_DIR})"
            )
        path = files[name_or_path]
    if not path.is_file():
        raise ConfigError(f"{path}: model file not found")
    return _load_cached(str(path.resolve()), path.stat().st_mtime)


def find_model_for(model_id: str) -> ModelSpec | None:
    """The capacity model whose name or hub id matches a profile's `model`, or None."""
    wanted = model_id.strip().rstrip("/").lower()
    tail = wanted.rsplit("/", 1)[-1]
    for path in model_files().values():
        spec = load_model(str(path))
        ids = [spec.name.lower(), *(h.lower() for h in spec.hub_ids)]
        if wanted in ids or tail in ids or any(tail == h.rsplit("/", 1)[-1] for h in ids):
            return spec
    return None
