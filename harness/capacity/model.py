"""Sparse-MLA model descriptions for the capacity calculator (`launch/models/<name>.yaml`).

A model file carries every number the calculator needs (layers, per-token bytes, top-K, weight
sizes, block constants, allowed parallelism) and, in `sources:`, where each number comes from.
Loading is strict (see `model_schema.py`): unknown keys, numbers without a source, sources for
keys that do not exist, and block sizes that contradict their stated decomposition are errors
naming the file and key. The validated content is cached under `cache_dir()/capacity-models/`,
keyed by the SHA-256 of the file and of the validator, so repeated calls skip pydantic entirely.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from harness.errors import ConfigError
from harness.paths import MODELS_DIR, cache_dir

KvDtype = Literal["fp8", "bf16"]
_SCHEMA_FILE = Path(__file__).with_name("model_schema.py")


@dataclass(frozen=True)
class Architecture:
    num_layers: int
    num_attention_heads: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    index_topk: int
    index_head_dim: int
    index_n_heads: int
    indexer_full_layers: int  # layers that store their own indexer keys
    n_routed_experts: int


@dataclass(frozen=True)
class Weights:
    shared_gib: float  # sharded by TP
    routed_experts_gib: float  # sharded by DP x TP with EP, by TP without


@dataclass(frozen=True)
class KvLayout:
    """Bytes of one block in each pool, for one KV dtype (per GPU: MLA KV is replicated by TP)."""

    baseline_block_bytes: int  # latent + indexer, GPU-resident vLLM
    hisparse_block_bytes: int  # one page of HiSparse's shared GPU pool
    host_block_bytes: int  # latent only, HiSparse host pool
    latent_bytes_per_token_layer: int | None = None
    indexer_bytes_per_token_layer: int | None = None


@dataclass(frozen=True)
class BlockTokens:
    baseline: int
    gpu: int
    host: int


@dataclass(frozen=True)
class Parallelism:
    tp_sizes: tuple[int, ...]
    dp_sizes: tuple[int, ...]


@dataclass(frozen=True)
class ModelSpec:
    name: str
    display_name: str
    description: str
    hub_ids: tuple[str, ...]
    architecture: Architecture
    weights: Weights
    gpu_memory_utilization: float
    runtime_reserve_gib: float
    block_tokens: BlockTokens
    kv_layouts: dict[str, KvLayout]
    hot_groups: int
    retained_pages_per_group: int
    other_gpu_blocks: int
    indexer_pages_per_block: int
    default_hot_rows: int
    calculator_max_seqs: int
    parallelism: Parallelism
    sources: dict[str, str]
    source_file: Path | None = None

    def layout(self, dtype: KvDtype) -> KvLayout:
        return self.kv_layouts[dtype]

    @classmethod
    def from_validated(cls, data: dict[str, Any], source_file: Path | None) -> ModelSpec:
        par = data["parallelism"]
        return cls(
            name=data["name"],
            display_name=data["display_name"],
            description=data.get("description", ""),
            hub_ids=tuple(data.get("hub_ids", ())),
            architecture=Architecture(**data["architecture"]),
            weights=Weights(**data["weights"]),
            gpu_memory_utilization=data["gpu_memory_utilization"],
            runtime_reserve_gib=data["runtime_reserve_gib"],
            block_tokens=BlockTokens(**data["block_tokens"]),
            kv_layouts={k: KvLayout(**v) for k, v in data["kv_layouts"].items()},
            hot_groups=data["hot_groups"],
            retained_pages_per_group=data["retained_pages_per_group"],
            other_gpu_blocks=data["other_gpu_blocks"],
            indexer_pages_per_block=data["indexer_pages_per_block"],
            default_hot_rows=data["default_hot_rows"],
            calculator_max_seqs=data["calculator_max_seqs"],
            parallelism=Parallelism(tuple(par["tp_sizes"]), tuple(par["dp_sizes"])),
            sources=dict(data["sources"]),
            source_file=source_file,
        )


def _validated_cache(digest: str) -> Path:
    return cache_dir() / "capacity-models" / f"{digest}.json"


def load_model_file(path: Path, *, use_cache: bool = True) -> ModelSpec:
    path = Path(path)
    try:
        content = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: model file not found") from None
    # The key covers the validator's source too: a stricter schema invalidates old entries.
    digest = hashlib.sha256(_SCHEMA_FILE.read_bytes() + b"\0" + content).hexdigest()
    cached = _validated_cache(digest) if use_cache else None
    if cached is not None and cached.is_file():
        try:
            return ModelSpec.from_validated(json.loads(cached.read_text("utf-8")), path)
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a damaged cache entry: validate again
    # Imported here, not at the top: a warm cache must not pay for pydantic (model_schema's doc).
    from harness.capacity.model_schema import validate_model_file

    data = validate_model_file(path, content)
    if cached is not None:
        _write_cache(cached, data)
    return ModelSpec.from_validated(data, path)


def _write_cache(path: Path, data: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass  # the cache only saves time


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
