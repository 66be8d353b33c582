"""The logic behind `repro dataset build|plan` options (kept out of the click wiring)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.dataset.builder import build_dataset
from harness.dataset.recipe import load_recipe, make_recipe
from harness.dataset.rotation import fresh_size, reuse_report
from harness.errors import ConfigError

# CLI option -> recipe field; the original's names and ours map to the same field.
_ALIASES = {
    "model_path": "tokenizer",
    "tokenizer": "tokenizer",
    "tokenizer_revision": "tokenizer_revision",
    "dataset_name": "trajectories",
    "trajectories": "trajectories",
    "trajectories_revision": "trajectories_revision",
    "split": "split",
    "only_resolved": "only_resolved",
    "first_turn_length": "first_turn_length",
    "subsequent_turn_length": "subsequent_turn_length",
    "num_turns": "num_turns",
    "number": "number",
    "seed": "seed",
    "pad_source": "pad_source",
    "pad_dataset_name": "pad_text",
    "pad_text": "pad_text",
    "pad_revision": "pad_revision",
    "pad_split": "pad_split",
    "pad_text_field": "pad_text_field",
    "max_real_first_turn_frac": "max_real_first_turn_frac",
    "max_rows": "max_rows",
    "tolerance": "tolerance",
}


def recipe_overrides(options: dict[str, Any]) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for option, field in _ALIASES.items():
        value = options.get(option)
        if value is None:
            continue
        if field in overrides and overrides[field] != value:
            raise ConfigError(f"conflicting values for {field}: {overrides[field]!r} and {value!r}")
        overrides[field] = value
    return overrides


def sweep_from_profile(name: str) -> tuple[int, list[int]]:
    """(dataset_offset, numbers) of a profile's sweep block."""
    from harness.serve.profiles import load_profile

    profile = load_profile(name)
    return profile.sweep.dataset_offset, [number for _parallel, number in profile.sweep.points]


def run_build(
    recipe_spec: str | None,
    options: dict[str, Any],
    *,
    echo: Callable[[str], None],
    warn: Callable[[str], None],
) -> Path:
    overrides = recipe_overrides(options)
    if recipe_spec:
        recipe = load_recipe(recipe_spec, overrides)
    else:
        recipe = make_recipe({}, overrides, where="command-line options")
    sweep_offset, sweep_numbers = options.get("sweep_offset"), options.get("sweep_numbers")
    if options.get("profile"):
        sweep_offset, sweep_numbers = sweep_from_profile(options["profile"])
    if options.get("fresh_for_sweep"):
        if sweep_offset is None or not sweep_numbers:
            raise ConfigError(
                "--fresh-for-sweep needs --sweep-offset and --sweep-numbers, or --profile"
            )
        size = fresh_size(sweep_offset, sweep_numbers)
        if options.get("number") is not None and options["number"] < size:
            raise ConfigError(
                f"--number {options['number']} is too small for a fresh sweep "
                f"(offset {sweep_offset}, numbers {sweep_numbers}): {size} needed"
            )
        if recipe.number < size:
            echo(f"--fresh-for-sweep: number {recipe.number} -> {size}")
            recipe = recipe.model_copy(update={"number": size})
    if sweep_offset is not None and sweep_numbers:
        for warning in reuse_report(recipe.number, sweep_offset, sweep_numbers)["warnings"]:
            warn(f"warning: {warning}")
    output = options.get("output_path")
    if output is None:
        output = Path(f"{recipe.name}.json" if recipe.name else "openhand-dataset.json")
    result = build_dataset(recipe, output, echo=echo)
    echo(f"manifest: {result.manifest_path}")
    return result.path
