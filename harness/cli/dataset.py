"""CLI wiring for the dataset area (logic lives in harness/dataset)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

import click

from harness.cli.options import flag, path_option, text_option


class IntListOption(click.Option):
    """An option taking one or more integers: `--numbers 4 16 32` (also `4,16,32` or repeated).

    Used with `IntListCommand`, which joins the integers that follow the option into one value
    before click parses the arguments, so a positional argument after the list still works.
    """


class IntListCommand(click.Command):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        names = {o for p in self.params if isinstance(p, IntListOption) for o in p.opts}
        joined: list[str] = []
        rest = iter(args)
        for arg in rest:
            if arg == "--":
                joined += [arg, *rest]
                break
            name, eq, value = arg.partition("=")
            if name not in names:
                joined.append(arg)
                continue
            values = [value] if eq else []
            if not eq:
                following = next(rest, None)
                if following is None:  # no value: let click report it
                    joined.append(arg)
                    break
                values.append(following)
            for following in rest:
                if not _looks_like_ints(following):
                    joined += [name, ",".join(values), following]
                    break
                values.append(following)
            else:
                joined += [name, ",".join(values)]
        return super().parse_args(ctx, joined)


# Largest conversation count, offset or per-point number a plan takes: 780x the blog's 128
# conversations. harness/dataset/rotation.py builds its lists in memory and searches the
# fresh size over every offset, so an unbounded value is a traceback or an hour-long hang.
PLAN_MAX = 100_000


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
            if not part.isdigit() or not 1 <= int(part) <= PLAN_MAX:  # 0: no point at all
                raise click.BadParameter(
                    f"{part!r} is not an integer in 1..{PLAN_MAX:,}", ctx, param
                )
            numbers.append(int(part))
    return numbers


def _profile_sweep(name: str) -> tuple[int, list[int]]:
    """(dataset_offset, numbers) of a profile's sweep block (--profile of build and plan)."""
    from harness.serve.profiles import load_profile

    profile = load_profile(name)
    return profile.sweep.dataset_offset, [number for _parallel, number in profile.sweep.points]


def _echo_err(message: str) -> None:
    click.echo(message, err=True)


@click.group("dataset")
def dataset_group() -> None:
    """Build, verify and plan the padded multi-turn (EvalScope swe_smith) dataset.

    Recipes live in datasets/<name>.yaml (openhands-glm53 = the blog's workload; cpu-tiny and
    openhands-offline build offline). Every turn hits its exact bare-token target under the
    tokenizer, checked by re-tokenizing before the file is written.
    """


def _click_type(annotation: Any) -> Any:
    """click type of a recipe field's annotation (None for a flag)."""
    if get_origin(annotation) is Literal:
        return click.Choice([str(v) for v in get_args(annotation)])
    if get_origin(annotation) in (Union, UnionType):
        (annotation,) = [a for a in get_args(annotation) if a is not type(None)]
    return None if annotation is bool else annotation


def _ranged(kind: Any, info: Any) -> Any:
    """``kind`` bounded as the recipe field is (ge/gt/le/lt in harness/dataset/recipe.py), so a
    value out of range is a usage error naming the option, not the recipe file."""
    if kind not in (int, float):
        return kind
    bounds: dict[str, Any] = {}
    for rule in info.metadata:  # annotated_types' Ge, Gt, Le, Lt
        for attr, key, is_open in (("ge", "min", False), ("gt", "min", True),
                                   ("le", "max", False), ("lt", "max", True)):  # fmt: skip
            if getattr(rule, attr, None) is not None:
                bounds[key], bounds[f"{key}_open"] = getattr(rule, attr), is_open
    if not bounds:
        return kind
    return (click.IntRange if kind is int else click.FloatRange)(**bounds)


def _recipe_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """One option per recipe field (`--first-turn-length` for first_turn_length, ...), plus the
    original builder's names declared in the schema; all default to None (= the recipe's)."""
    from harness.dataset.recipe import alias_dest, cli_fields

    for name, info, aliases in reversed(cli_fields()):
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        kind = _click_type(info.annotation)
        flag = "--" + name.replace("_", "-")
        default = "" if info.default in (None, "") else f" (default {info.default})"
        settings: dict[str, Any] = {"metavar": extra.get("metavar"), "default": None}
        if kind is None:
            settings = {"is_flag": True, "default": None}
        else:
            settings["type"] = _ranged(kind, info)
        if aliases:
            alias_help = f"The original builder's name for {flag}."
            command = click.option(*aliases, alias_dest(name), help=alias_help, **settings)(command)
        command = click.option(flag, name, help=f"{info.description}{default}", **settings)(command)
    return command


@dataset_group.command("build", cls=IntListCommand)
@click.argument("recipe", required=False)
@_recipe_options
@path_option(
    "--output-path",
    "output_path",
    help="Output JSON (default: openhand-dataset.json, or <recipe>.json for a recipe). A sidecar <output>.manifest.json is written next to it.",
)
@flag(
    "--fresh-for-sweep",
    help="Size --number so that every sweep point replays unused conversations.",
)
@flag("--force", help="Replace an existing output file and its manifest.")
@click.option(
    "--sweep-offset",
    type=click.IntRange(min=0, max=PLAN_MAX),
    help="Sweep start offset for --fresh-for-sweep.",
)
@click.option(
    "--sweep-numbers",
    cls=IntListOption,
    callback=_int_list,
    metavar="N [N ...]",
    help="Per-point numbers for --fresh-for-sweep, e.g. 4 16 32 48 64.",
)
@text_option("--profile", "profile", help="Take the sweep (offset, numbers) from this profile.")
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

    run_build(recipe, options, echo=click.echo, warn=_echo_err, sweep_of_profile=_profile_sweep)


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
@click.option(
    "--first-turn-length",
    type=click.IntRange(min=1),
    help="Target for turn 1 (default: file metadata).",
)
@click.option(
    "--subsequent-turn-length",
    type=click.IntRange(min=0),
    help="Target for later turns (default: file metadata).",
)
@click.option(
    "--output-tokens",
    type=click.IntRange(min=0),
    default=220,
    show_default=True,
    help="Tokens assumed per assistant reply in templated prompt lengths.",
)
@flag(
    "--full-template", help="Also render every first turn in full to cross-check templated counts."
)
@flag("--per-turn", help="Print every conversation's every turn.")
@path_option("--json", "json_out", help="Write the full report as JSON here.")
@click.option(
    "--tolerance",
    type=click.IntRange(min=0),
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
    from harness.results import atomic_write_json, check_not_run_record

    if json_out:
        check_not_run_record(json_out, "--json")  # before the (slow) re-tokenizing
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
    problems = [report["checksum"]] if report.get("checksum") else []  # data != its sidecar
    if report["max_abs_drift"] > tolerance:
        problems.insert(
            0,
            f"{file}: {report['turns'] - report['exact_turns']} turns off target "
            f"(max |drift| {report['max_abs_drift']} > tolerance {tolerance})",
        )
    if problems:
        raise DatasetError("; ".join(problems))


@dataset_group.command("plan", cls=IntListCommand)
@click.option(
    "--offset",
    type=click.IntRange(min=0, max=PLAN_MAX),
    default=52,
    show_default=True,
    help="First point's --dataset-offset.",
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
    type=click.IntRange(min=1, max=PLAN_MAX),
    default=128,
    show_default=True,
    help="Conversations in the dataset.",
)
@text_option("--profile", "profile", help="Take offset and numbers from this profile's sweep.")
@flag("--json", "as_json", help="Print the full plan as JSON.")
def plan_command(
    offset: int, numbers: list[int] | None, conversations: int, profile: str | None, as_json: bool
) -> None:
    """Which conversations each sweep point replays (EvalScope's rotation), and reuse warnings."""
    from harness.dataset.rotation import reuse_report

    if profile:
        offset, numbers = _profile_sweep(profile)
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
