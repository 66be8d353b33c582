"""CLI wiring for `repro plan` (logic in harness.plan)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from harness.cli.options import FiniteFloat, flag, text_option


def register(group: click.Group) -> None:
    """Add this area's commands to the `repro` group."""
    group.add_command(plan)


_COUNT = click.IntRange(min=1)


@click.command(
    "plan",
    epilog=(
        "Examples:\n\n"
        "  repro plan --model glm-5.3 --gpu h200 --slo tpot=70ms\n\n"
        "  repro plan --slo ttft=5s,tpot=50ms --think-time '{kind: exponential, mean_s: 30, "
        "seed: 1}' --concurrency 8,16,32,48,64\n\n"
        "  repro plan --slo tpot=70ms --arms hisparse --host-pool-gib 256,384 --format json"
    ),
)
@click.option("--model", default="glm-5.3", show_default=True, help="launch/models NAME.")
@click.option("--gpu", default="h200", show_default=True, help="GPU: h200, b200 or b300.")
@click.option("--tp", type=_COUNT, default=None, help="Tensor parallel size [default: 8, DP1].")
@click.option("--turns", type=_COUNT, default=13, show_default=True, help="Turns per conversation.")
@click.option(
    "--context",
    type=_COUNT,
    default=74160,
    show_default=True,
    help="Prompt tokens of turn 1 (the agent's long context).",
)
@click.option(
    "--turn-tokens", type=_COUNT, default=753, show_default=True, help="New tokens per later turn."
)
@click.option(
    "--output-tokens", type=_COUNT, default=220, show_default=True, help="Tokens per reply."
)
@text_option(
    "--think-time",
    metavar="YAML",
    help="Pause before each later turn, as a workload's think_time, e.g. "
    "'{kind: exponential, mean_s: 5, seed: 1}' [default: none, the blog's].",
)
@text_option("--slo", metavar="OBJECTIVES", help="Objectives, e.g. ttft=2s,tpot=70ms (required).")
@click.option(
    "--min-attainment",
    type=FiniteFloat(1.0, above=0.0),
    default=0.9,
    show_default=True,
    help="Share of requests that must meet the objectives.",
)
@text_option("--arms", metavar="A,B", help="Arms [default: hisparse,offload].")
@text_option("--host-pool-gib", metavar="GIB,...", help="Host pools [default: 128,256,384,512].")
@text_option("--max-num-seqs", metavar="N,...", help="max-num-seqs [default: 4,8,16,24,256].")
@text_option("--concurrency", metavar="C,...", help="Concurrencies [default: 1,8,16,24,32].")
@text_option(
    "--calibration",
    metavar="FILE|none",
    help="Calibration [default: the launch/calibrations/ file fitted for the model and GPU].",
)
@click.option("--top", type=_COUNT, default=10, show_default=True, help="Rows in the table.")
@click.option("--jobs", type=click.IntRange(1, 64), default=2, show_default=True,
              help="Simulator processes.")  # fmt: skip
@flag("--no-cache", help="Simulate every configuration again (the cache is rewritten).")
@flag("--no-prune", help="Simulate every unique configuration (no bounds).")
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
def plan(
    model: str,
    gpu: str,
    tp: int | None,
    turns: int,
    context: int,
    turn_tokens: int,
    output_tokens: int,
    think_time: str | None,
    slo: str | None,
    min_attainment: float,
    arms: str | None,
    host_pool_gib: str | None,
    max_num_seqs: str | None,
    concurrency: str | None,
    calibration: str | None,
    top: int,
    jobs: int,
    no_cache: bool,
    no_prune: bool,
    fmt: str,
) -> None:
    """Search the calibrated simulator for the configurations with the most goodput per GPU.

    Grid: arm x host pool x max-num-seqs x concurrency. Each configuration is one simulated
    point; results are cached (REPRO_CACHE/plan), configurations with max-num-seqs >= c share
    one simulation, and bounds from a c1 probe skip points that cannot enter the table
    (docs/plan.md). Progress goes to stderr.
    """
    from harness.errors import ConfigError
    from harness.plan.inputs import TrafficShape
    from harness.plan.render import plan_record, render_text
    from harness.plan.resolve import build_request
    from harness.plan.search import search

    try:
        request = build_request(
            model=model,
            gpu=gpu,
            tp=tp,
            traffic=TrafficShape(turns, context, turn_tokens, output_tokens),
            think_time=think_time,
            slo=slo,
            min_attainment=min_attainment,
            arms=arms,
            pools=host_pool_gib,
            max_num_seqs=max_num_seqs,
            concurrency=concurrency,
            calibration=calibration,
            top=top,
            base_dir=Path.cwd(),
        )
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    with click.progressbar(length=len(request.grid()), label="plan", file=sys.stderr) as bar:
        shown = 0

        def progress(done: int, _total: int) -> None:
            nonlocal shown
            bar.update(done - shown)
            shown = done

        result = search(
            request, jobs=jobs, use_cache=not no_cache, prune=not no_prune, progress=progress
        )
    record = plan_record(result)
    click.echo(record.model_dump_json(indent=2) if fmt == "json" else render_text(record))
