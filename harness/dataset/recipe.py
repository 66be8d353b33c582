"""Dataset recipes: the builder's parameters, validated strictly (unknown keys are errors).

Field names follow the original `build_openhands_padded_dataset.py` options
(docs/recipe.md §6.1), with `tokenizer` for `--model`, `trajectories` for `--dataset-name` and `pad_text` for
`--pad-dataset-name`. Defaults are the original's defaults.

The schema is also the CLI: `repro dataset build` has one option per field (`--<field-name>`,
help from the field's description) and, where the original's option name differs, that name as
a second option declared on the field (`cli_aliases`); see `cli_fields` and `cli_overrides`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo

from harness.config import read_yaml
from harness.errors import ConfigError
from harness.paths import DATASETS_DIR

SYNTHETIC = "synthetic"


def _field(default: Any, help: str, *aliases: str, metavar: str | None = None, **kw: Any) -> Any:
    """A recipe field with its `repro dataset build` option: --<field-name>, plus `aliases`
    (the original builder's option names, docs/recipe.md §6.1) as a second option for the field."""
    extra: dict[str, Any] = {"cli_aliases": list(aliases)}
    if metavar:
        extra["metavar"] = metavar
    return Field(default=default, description=help, json_schema_extra=extra, **kw)


_NOT_AN_OPTION: dict[str, Any] = {"cli": False}


class Recipe(BaseModel):
    """One padded multi-turn dataset: sources, shape and seeds."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="", json_schema_extra=_NOT_AN_OPTION)
    description: str = Field(default="", json_schema_extra=_NOT_AN_OPTION)
    # Sources: hub ids (network), local files/dirs (always), or "synthetic" (offline generator).
    tokenizer: str = _field(
        "nvidia/GLM-5.2-NVFP4",
        "Tokenizer: local dir, tokenizer.json, hub id, or tiny:tokenizer.",
        "--model",
        "--model-path",
        metavar="ID|PATH",
    )
    tokenizer_revision: str | None = _field(None, "Hub revision of the tokenizer.")
    trajectories: str = _field(
        "nebius/SWE-rebench-openhands-trajectories",
        "Trajectory rows: hub id, local parquet/JSONL file or dir, or 'synthetic'.",
        "--dataset-name",
        metavar="ID|PATH|synthetic",
    )
    trajectories_revision: str | None = _field(None, "Hub revision of the trajectories.")
    split: str = _field("train", "Trajectory split.")
    only_resolved: bool = _field(False, "Keep only rows with resolved == 1.")
    max_rows: int | None = _field(None, "Debug cap on trajectory rows scanned.", ge=1)
    # Shape (bare tokens = encode(text, add_special_tokens=False)).
    first_turn_length: int = _field(74160, "Bare tokens in turn 1 (system pad + user).", ge=1)
    subsequent_turn_length: int = _field(753, "Bare tokens in each later turn.", ge=0)
    num_turns: int = _field(13, "Turns per conversation.", ge=1)
    # at most harness/cli/dataset.py's PLAN_MAX: a plan of more cannot be made, and a build of
    # 10^14 ran until killed
    number: int = _field(128, "Conversations to build.", ge=1, le=100_000)
    # numpy's RandomState takes 0 .. 2**32 - 1; seed + conversation must stay inside it
    seed: int = _field(
        42, "Seed (random pad: RandomState(seed + conversation)).", ge=0, le=2**31 - 1
    )
    max_real_first_turn_frac: float = _field(
        0.5, "Cap on the real share of turn 1.", gt=0.0, le=1.0
    )
    # Padding.
    pad_source: Literal["openscience", "random"] = _field(
        "openscience", "Pad from a text pool (openscience) or random whole-word tokens."
    )
    pad_text: str = _field(
        "nvidia/OpenScienceReasoning-2",
        "Pad text rows: hub id, local parquet/JSONL, or 'synthetic'.",
        "--pad-dataset-name",
        metavar="ID|PATH|synthetic",
    )
    pad_revision: str | None = _field(None, "Hub revision of the pad text.")
    pad_split: str = _field("train", "Pad text split.")
    pad_text_field: str = _field("output", "Pad text field.")
    # `prompt_tokens` of turn t >= 2 adds this per earlier reply (the original's OSL estimate).
    output_tokens_estimate: int = _field(
        220, "Tokens assumed per assistant reply in prompt_tokens of later turns.", ge=0
    )
    # Largest |drift| in tokens tolerated per turn after the builder's own re-tokenisation.
    tolerance: int = _field(
        0, "Largest |drift| in tokens accepted per turn after re-tokenization.", ge=0
    )
    # Pre-write check: "windows" re-tokenizes real text in full and pad spans around every place
    # where separately encoded text meets (exact for locally splitting pre-tokenizers; others
    # fall back to full); "full" re-tokenizes every character.
    verify: Literal["windows", "full"] = _field(
        "windows", "Pre-write check: pad spans in windows around their joins, or in full."
    )

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
    data = read_yaml(path, "dataset recipe") or {}  # bad YAML or a key twice: one line
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


def cli_fields() -> list[tuple[str, FieldInfo, list[str]]]:
    """(field name, pydantic FieldInfo, original option names) of every field that is a
    `repro dataset build` option, in declaration order."""
    fields = []
    for name, info in Recipe.model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        if extra.get("cli") is False:
            continue
        aliases = extra.get("cli_aliases") or []
        fields.append((name, info, [str(a) for a in aliases] if isinstance(aliases, list) else []))
    return fields


def alias_dest(field: str) -> str:
    """The keyword under which a field's original-name option arrives from click."""
    return f"{field}__original_name"


def cli_overrides(options: dict[str, Any]) -> dict[str, Any]:
    """Recipe overrides from parsed options (a field's own option and its original name must
    agree when both are given)."""
    overrides: dict[str, Any] = {}
    for field, _info, aliases in cli_fields():
        values = [options.get(field), options.get(alias_dest(field)) if aliases else None]
        given = [v for v in values if v is not None]
        if len(given) == 2 and given[0] != given[1]:
            raise ConfigError(f"conflicting values for {field}: {given[1]!r} and {given[0]!r}")
        if given:
            overrides[field] = given[0]
    return overrides
