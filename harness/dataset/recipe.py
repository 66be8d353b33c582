"""Dataset recipes: the builder's parameters, validated strictly (unknown keys are errors).

Field names follow the original `build_openhands_padded_dataset.py` options (recipe.md §6.1), with
`tokenizer` for `--model`, `trajectories` for `--dataset-name` and `pad_text` for
`--pad-dataset-name`. Defaults are the original's defaults.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.errors import ConfigError
from harness.paths import DATASETS_DIR

SYNTHETIC = "synthetic"


class Recipe(BaseModel):
    """One padded multi-turn dataset: sources, shape and seeds."""

    model_config = ConfigDict(extra="forbid")

    name: str = ""
    description: str = ""
    # Sources: hub ids (network), local files/dirs (always), or "synthetic" (offline generator).
    tokenizer: str = "nvidia/GLM-5.2-NVFP4"
    tokenizer_revision: str | None = None
    trajectories: str = "nebius/SWE-rebench-openhands-trajectories"
    trajectories_revision: str | None = None
    split: str = "train"
    only_resolved: bool = False
    max_rows: int | None = Field(default=None, ge=1)
    # Shape (bare tokens = encode(text, add_special_tokens=False)).
    first_turn_length: int = Field(default=74160, ge=1)
    subsequent_turn_length: int = Field(default=753, ge=0)
    num_turns: int = Field(default=13, ge=1)
    number: int = Field(default=128, ge=1)
    seed: int = 42
    max_real_first_turn_frac: float = Field(default=0.5, gt=0.0, le=1.0)
    # Padding.
    pad_source: Literal["openscience", "random"] = "openscience"
    pad_text: str = "nvidia/OpenScienceReasoning-2"
    pad_revision: str | None = None
    pad_split: str = "train"
    pad_text_field: str = "output"
    # `prompt_tokens` of turn t >= 2 adds this per earlier reply (the original's OSL estimate).
    output_tokens_estimate: int = Field(default=220, ge=0)
    # Largest |drift| in tokens tolerated per turn after the builder's own re-tokenisation.
    tolerance: int = Field(default=0, ge=0)
    # Pre-write check: "windows" re-tokenizes real text in full and pad spans around every place
    # where separately encoded text meets (exact for locally splitting pre-tokenizers; others
    # fall back to full); "full" re-tokenizes every character.
    verify: Literal["windows", "full"] = "windows"

    def fingerprint(self) -> str:
        """sha256 of the fields that determine the output bytes (name/description excluded)."""
        data = self.model_dump(exclude={"name", "description"})
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()

    def pad_budget(self) -> int:
        """Bare-token budget of the whole dataset: number x (F + (N-1) x S)."""
        return self.number * (
            self.first_turn_length + (self.num_turns - 1) * self.subsequent_turn_length
        )


def _format_validation(exc: ValidationError, where: str) -> str:
    problems = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "<root>"
        if err["type"] == "extra_forbidden":
            problems.append(f"unknown key {key!r}")
        else:
            problems.append(f"{key}: {err['msg']} (got {err.get('input')!r})")
    return f"{where}: " + "; ".join(problems)


def recipe_path(spec: str) -> Path | None:
    """datasets/<spec>.yaml for a bare name, the file itself for a YAML path, else None."""
    path = Path(spec).expanduser()
    if path.suffix in (".yaml", ".yml"):
        return path
    if "/" not in spec and (DATASETS_DIR / f"{spec}.yaml").is_file():
        return DATASETS_DIR / f"{spec}.yaml"
    return None


def available_recipes() -> list[str]:
    return sorted(p.stem for p in DATASETS_DIR.glob("*.yaml"))


def load_recipe(spec: str, overrides: dict[str, Any] | None = None) -> Recipe:
    """A recipe by name (datasets/<name>.yaml) or YAML path, with optional field overrides."""
    path = recipe_path(spec)
    if path is None:
        raise ConfigError(
            f"dataset recipe {spec!r} not found (known: {', '.join(available_recipes())})"
        )
    if not path.is_file():
        raise ConfigError(f"dataset recipe file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a recipe must be a mapping of keys, got {type(data).__name__}")
    data.setdefault("name", path.stem)
    return make_recipe(data, overrides, where=str(path))


def make_recipe(
    data: dict[str, Any], overrides: dict[str, Any] | None = None, *, where: str = "recipe"
) -> Recipe:
    merged = dict(data)
    for key, value in (overrides or {}).items():
        if value is not None:
            merged[key] = value
    try:
        return Recipe.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(_format_validation(exc, where)) from exc
