"""CLI wiring for the dataset area (logic lives in harness/dataset)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click


class IntListOption(click.Option):
    """An option taking one or more integers: `--numbers 4 16 32` (also `4,16,32` or repeated).

    Consumes the following arguments while they look like integers, so a positional argument
    after the list still works.
    """

    def add_to_parser(self, parser: Any, ctx: click.Context) -> Any:
        result = super().add_to_parser(parser, ctx)
        for name in self.opts:
            option = parser._long_opt.get(name) or parser._short_opt.get(name)
            if option is None:
                continue
            original = option.process

            def process(value: Any, state: Any, original: Any = original) -> None:
                values = [value]
                while state.rargs and _looks_like_ints(state.rargs[0]):
                    values.append(state.rargs.pop(0))
                original(",".join(values), state)

            option.process = process
        return result


def _looks_like_ints(text: str) -> bool:
    return all(part.strip().isdigit() for part in text.split(",") if part.strip()) and any(
        part.strip() for part in text.split(",")
    )


def _int_list(ctx: click.Context, param: click.Parameter, value: Any) -> list[int] | None:
    if value is None or value == ():
        return None
    raw = value if isinstance(value, tuple | list) else (value,)
    numbers: list[int] = []
    for item in raw:
        for part in str(item).split(","):
            part = part.strip()
            if not part:
                continue
            if not part.isdigit():
                raise click.BadParameter(f"{part!r} is not a non-negative integer", ctx, param)
            numbers.append(int(part))
    return numbers


def _echo_err(message: str) -> None:
    click.echo(message, err=True)


@click.group("dataset")
def dataset_group() -> None:
    """Build, verify and plan the padded multi-turn (EvalScope swe_smith) dataset.

    Recipes live in datasets/<name>.yaml (openhands-glm53 = the blog's workload; cpu-tiny and
    openhands-offline build offline). Every turn hits its exact bare-token target under the
    tokenizer, checked by re-tokenizing before the file is written.
    """


@dataset_group.command("build")
@click.argument("recipe", required=False)
@click.option(
    "--model",
    "--model-path",
    "model_path",
    metavar="ID|PATH",
    help="Tokenizer source (the original's --model); same as --tokenizer.",
)
@click.option(
    "--tokenizer",
    "tokenizer",
    metavar="ID|PATH",
    help="Tokenizer: local dir, tokenizer.json, hub id, or tiny:tokenizer.",
)
@click.option("--tokenizer-revision", help="Hub revision of the tokenizer.")
@click.option(
    "--dataset-name",
    "dataset_name",
    metavar="ID|PATH",
    help="Trajectories (the original's --dataset-name); same as --trajectories.",
)
@click.option(
    "--trajectories",
    metavar="ID|PATH|synthetic",
    help="Trajectory rows: hub id, local parquet/JSONL file or dir, or 'synthetic'.",
)
@click.option("--trajectories-revision", help="Hub revision of the trajectories.")
@click.option("--split", help="Trajectory split (default train).")
@click.option(
    "--only-resolved", is_flag=True, default=None, help="Keep only rows with resolved == 1."
)
@click.option("--first-turn-length", type=int, help="Bare tokens in turn 1 (system pad + user).")
@click.option("--subsequent-turn-length", type=int, help="Bare tokens in each later turn.")
@click.option("--num-turns", type=int, help="Turns per conversation.")
@click.option("--number", type=int, help="Conversations to build.")
@click.option("--seed", type=int, help="Seed (random pad: RandomState(seed + conversation)).")
@click.option(
    "--pad-source",
    type=click.Choice(["openscience", "random"]),
    help="Pad from a text pool (openscience) or random whole-word tokens.",
)
@click.option(
    "--pad-dataset-name",
    "pad_dataset_name",
    metavar="ID|PATH",
    help="Pad text source (the original's option); same as --pad-text.",
)
@click.option(
    "--pad-text",
    metavar="ID|PATH|synthetic",
    help="Pad text rows: hub id, local parquet/JSONL, or 'synthetic'.",
)
@click.option("--pad-revision", help="Hub revision of the pad text.")
@click.option("--pad-split", help="Pad text split (default train).")
@click.option("--pad-text-field", help="Pad text field (default output).")
@click.option(
    "--max-real-first-turn-frac", type=float, help="Cap on the real share of turn 1 (default 0.5)."
)
@click.option("--max-rows", type=int, help="Debug cap on trajectory rows scanned.")
@click.option(
    "--tolerance",
    type=int,
    help="Largest |drift| in tokens accepted per turn after re-tokenization (default 0).",
)
@click.option(
    "--output-path",
    "output_path",
    type=click.Path(path_type=Path),
    help="Output JSON (default: openhand-dataset.json, or <recipe>.json for a recipe)."
    " A sidecar <output>.manifest.json is written next to it.",
)
@click.option(
    "--fresh-for-sweep",
    is_flag=True,
    help="Size --number so that every sweep point replays unused conversations.",
)
@click.option("--sweep-offset", type=int, help="Sweep start offset for --fresh-for-sweep.")
@click.option(
    "--sweep-numbers",
    cls=IntListOption,
    callback=_int_list,
    metavar="N [N ...]",
    help="Per-point numbers for --fresh-for-sweep, e.g. 4 16 32 48 64.",
)
@click.option("--profile", "profile", help="Take the sweep (offset, numbers) from this profile.")
def build_command(recipe: str | None, **options: Any) -> None:
    """Build the padded dataset from RECIPE (name or .yaml path) and/or options.

    Without RECIPE the original builder's defaults apply (hub sources), so the blog's command
    works unchanged, e.g.

      repro dataset build --model zai-org/GLM-5.3 --pad-source openscience
        --first-turn-length 74160 --subsequent-turn-length 753 --num-turns 13 --number 128
        --output-path openhand-zai-org-GLM-5.3.json

    Offline: repro dataset build openhands-offline (tiny tokenizer, synthetic sources).
    """
    from harness.dataset.cli_support import run_build

    run_build(recipe, options, echo=click.echo, warn=_echo_err)


@dataset_group.command("verify")
@click.argument("file", type=click.Path(path_type=Path))
@click.option(
    "--tokenizer",
    "--model",
    "tokenizer",
    required=True,
    metavar="ID|PATH",
    help="Tokenizer to count with (local dir, hub id, tiny:tokenizer).",
)
@click.option("--first-turn-length", type=int, help="Target for turn 1 (default: file metadata).")
@click.option(
    "--subsequent-turn-length", type=int, help="Target for later turns (default: file metadata)."
)
@click.option(
    "--output-tokens",
    type=int,
    default=220,
    show_default=True,
    help="Tokens assumed per assistant reply in templated prompt lengths.",
)
@click.option(
    "--full-template",
    is_flag=True,
    help="Also render every first turn in full to cross-check templated counts.",
)
@click.option("--per-turn", is_flag=True, help="Print every conversation's every turn.")
@click.option(
    "--json",
    "json_out",
    type=click.Path(path_type=Path),
    help="Write the full report as JSON here.",
)
@click.option(
    "--tolerance",
    type=int,
    default=0,
    show_default=True,
    help="Exit non-zero when any turn drifts by more than this.",
)
def verify_command(
    file: Path,
    tokenizer: str,
    first_turn_length: int | None,
    subsequent_turn_length: int | None,
    output_tokens: int,
    full_template: bool,
    per_turn: bool,
    json_out: Path | None,
    tolerance: int,
) -> None:
    """Re-tokenize FILE: per-turn bare counts, drift from the targets, templated prompt lengths."""
    from harness.dataset.tok import TokenizerHandle
    from harness.dataset.verify import summary_lines, verify_file
    from harness.errors import DatasetError
    from harness.results import atomic_write_json

    report = verify_file(
        file,
        TokenizerHandle(tokenizer),
        first_turn_length=first_turn_length,
        subsequent_turn_length=subsequent_turn_length,
        output_tokens_estimate=output_tokens,
        full_template=full_template,
    )
    for line in summary_lines(report, per_turn=per_turn):
        click.echo(line)
    if json_out:
        atomic_write_json(json_out, report)
        click.echo(f"report: {json_out}")
    if report["max_abs_drift"] > tolerance:
        raise DatasetError(
            f"{file}: {report['turns'] - report['exact_turns']} turns off target "
            f"(max |drift| {report['max_abs_drift']} > tolerance {tolerance})"
        )


@dataset_group.command("plan")
@click.option(
    "--offset", type=int, default=52, show_default=True, help="First point's --dataset-offset."
)
@click.option(
    "--numbers",
    cls=IntListOption,
    callback=_int_list,
    metavar="N [N ...]",
    help="Per-point --number values (default: the blog's 4 16 32 48 64).",
)
@click.option(
    "--conversations",
    type=int,
    default=128,
    show_default=True,
    help="Conversations in the dataset.",
)
@click.option("--profile", "profile", help="Take offset and numbers from this profile's sweep.")
@click.option("--json", "as_json", is_flag=True, help="Print the full plan as JSON.")
def plan_command(
    offset: int, numbers: list[int] | None, conversations: int, profile: str | None, as_json: bool
) -> None:
    """Which conversations each sweep point replays (EvalScope's rotation), and reuse warnings."""
    from harness.dataset.cli_support import sweep_from_profile
    from harness.dataset.rotation import reuse_report

    if profile:
        offset, numbers = sweep_from_profile(profile)
    report = reuse_report(conversations, offset, numbers or [4, 16, 32, 48, 64])
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    click.echo(f"{conversations} conversations, start offset {offset}:")
    for point in report["points"]:
        click.echo(
            f"  point {point['index']}: number {point['number']:>4}  offset {point['offset']:>5}"
            f"{'' if point['rotated'] else ' (no rotation)'}  replays {point['ranges']}"
            f"  reused {len(point['reused'])}"
        )
    for warning in report["warnings"]:
        click.echo(f"warning: {warning}")
    if not report["warnings"]:
        click.echo("every point replays conversations no earlier point used")


def register(group: click.Group) -> None:
    """Add this area's commands to the `repro` group."""
    group.add_command(dataset_group)
