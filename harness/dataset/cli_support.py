"""The logic behind `repro dataset build|plan` options (kept out of the click wiring)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.dataset.builder import build_dataset, manifest_path_for
from harness.dataset.output import output_lock
from harness.dataset.recipe import cli_overrides, load_recipe, make_recipe
from harness.dataset.rotation import fresh_size, reuse_report
from harness.errors import ConfigError, DatasetError


def check_output(output: Path, *, force: bool) -> None:
    """Before any work: never replace a built dataset silently, and fail now, naming the path,
    when the output cannot be written at all."""
    manifest = manifest_path_for(output)
    if not force and (output.exists() or manifest.exists()):
        taken = output if output.exists() else manifest
        raise DatasetError(
            f"{taken}: already exists; a built dataset is never replaced silently "
            "(--force replaces it, or choose another --output-path)"
        )
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=output.parent, prefix=f".{output.name}."):
            pass
    except OSError as exc:
        raise DatasetError(f"--output-path {output}: cannot write there ({exc.strerror})") from None


def run_build(
    recipe_spec: str | None,
    options: dict[str, Any],
    *,
    echo: Callable[[str], None],
    warn: Callable[[str], None],
    sweep_of_profile: Callable[[str], tuple[int, list[int]]],
) -> Path:
    """Build the dataset the recipe and options describe; `sweep_of_profile` reads --profile's
    (dataset offset, per-point numbers) (profiles are a layer above the dataset builder)."""
    overrides = cli_overrides(options)
    if recipe_spec:
        recipe = load_recipe(recipe_spec, overrides)
    else:
        recipe = make_recipe({}, overrides, where="command-line options")
    sweep_offset, sweep_numbers = options.get("sweep_offset"), options.get("sweep_numbers")
    if options.get("profile"):
        sweep_offset, sweep_numbers = sweep_of_profile(options["profile"])
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
    check_output(Path(output), force=bool(options.get("force")))
    with output_lock(Path(output)):  # a concurrent build of the same path fails, not races
        check_output(Path(output), force=bool(options.get("force")))  # it may have finished
        result = build_dataset(recipe, output, echo=echo)
    echo(f"manifest: {result.manifest_path}")
    return result.path
