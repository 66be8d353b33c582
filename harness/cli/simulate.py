"""CLI wiring for `repro simulate` and `repro simulate calibrate` (logic in harness.sim)."""

from __future__ import annotations

from pathlib import Path

import click

from harness.cli.options import overrides_option, path_option, text_option
from harness.paths import REPO_ROOT

DEFAULT_CALIBRATION = REPO_ROOT / "launch" / "calibrations" / "glm53-h200.yaml"


def register(group: click.Group) -> None:
    """Add this area's commands to the `repro` group."""
    group.add_command(simulate)


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


@click.group(
    "simulate",
    invoke_without_command=True,
    epilog=(
        "Examples:\n\n"
        "  repro simulate --profile hisparse384 --calibration "
        "launch/calibrations/glm53-h200.yaml\n\n"
        "  repro simulate --profile offload512 --points c1,c8 --set sim.prefill_eff=0.3\n\n"
        "  repro simulate calibrate"
    ),
)
@text_option("--profile", "profile", metavar="NAME", help="Serve profile.")
@text_option(
    "--dataset",
    metavar="RECIPE|FILE",
    help="Per-turn token counts [default: blog-shaped, 128 x 13 turns].",
)
@path_option(
    "--calibration",
    dir_okay=False,
    help="Calibration file, or none for the roofline defaults [default: the launch/calibrations/ file fitted for the profile's model and GPU; a run without one is labelled uncalibrated].",
)
@overrides_option("serve./sweep. profile override, or sim.PARAM=VALUE (repeatable).")
@click.option(
    "--points",
    "points",
    multiple=True,
    metavar="c8,c16",
    help="Only these points (the rest of the plan is skipped).",
)
@path_option("--out", file_okay=False, help="Parent of the run directory [default: results/].")
@text_option("--run-id", help="Run directory name [default: sim-PROFILE-TIME].")
@click.pass_context
def simulate(
    ctx: click.Context,
    profile: str | None,
    dataset: str | None,
    calibration: Path | None,
    overrides: tuple[str, ...],
    points: tuple[str, ...],
    out: Path | None,
    run_id: str | None,
) -> None:
    """Simulate a profile's sweep without GPUs; write a run directory (engine: sim).

    The run has the schema of a real sweep (manifest, points/*/point.json, samples.csv with
    vLLM's metric names, summary), so report / compare / claims check / regress read it.
    """
    if ctx.invoked_subcommand is not None:
        return
    if profile is None:
        raise click.UsageError("--profile is required (or use `repro simulate calibrate`)")
    from harness.results import load_run
    from harness.sim.run import run_simulation

    run_dir = run_simulation(
        profile,
        dataset=dataset,
        calibration=calibration,
        overrides=overrides,
        points=points or None,
        out=out,
        run_id=run_id,
    )
    click.echo(
        f"{'point':6} {'occupancy':>9} {'tok/s/user':>10} {'tput/GPU':>9} "
        f"{'preempt':>7} {'waiting':>7}"
    )
    for p in load_run(run_dir).points:
        m = p.metrics
        click.echo(
            f"{p.label:6} {_fmt(m.get('occupancy'), '9.1f')} "
            f"{_fmt(m.get('interactivity'), '10.1f')} "
            f"{_fmt(m.get('throughput_per_gpu'), '9.0f')} "
            f"{_fmt(m.get('preemptions'), '7.0f')} {_fmt(m.get('waiting_mean'), '7.1f')}"
        )
    click.echo(f"calibration: {load_run(run_dir).manifest.notes[-1].removeprefix('calibration: ')}")
    click.echo(str(run_dir))


@simulate.command("calibrate")
@path_option(
    "--out",
    "out",
    dir_okay=False,
    default=DEFAULT_CALIBRATION,
    show_default=True,
    help="Calibration file to write.",
)
@click.option(
    "--max-evals",
    type=click.IntRange(min=1),
    default=150,
    show_default=True,
    help="Simulated sweeps per fit.",
)
@click.option(
    "--model",
    "model",
    default="glm-5.3",
    show_default=True,
    help="Model to calibrate (only the published figure's model is accepted).",
)
@click.option(
    "--gpu",
    "gpu",
    default="h200",
    show_default=True,
    help="GPU to calibrate (only the published figure's GPU is accepted).",
)
@path_option(
    "--start",
    "start",
    dir_okay=False,
    help="Start the fit from this calibration's values [default: docs/simulator.md's values; prefill_eff, when fitted, scanned first].",
)
def calibrate(out: Path, max_evals: int, model: str, gpu: str, start: Path | None) -> None:
    """Fit seven bounded parameters to the blog's two MTP3 series; predict all four arms."""
    from harness.errors import ConfigError
    from harness.sim import calibrate as cal
    from harness.sim.config import load_calibration

    if (model, gpu) != (cal.TARGET_MODEL, cal.TARGET_GPU):
        raise ConfigError(
            f"--model {model} --gpu {gpu}: the published series were measured "
            f"on {cal.TARGET_MODEL} / {cal.TARGET_GPU}; no calibration for "
            "another model or GPU can be fitted to them"
        )
    from harness.results import check_writable

    check_writable(out)  # now, not after a fit of minutes to hours whose result would be lost
    targets = cal.load_targets()
    begin = None
    if start is not None:
        begin = {**cal.START, **load_calibration(start).params}
    params, rows, evals = cal.fit(targets, max_evals=max_evals, start=begin, echo=click.echo)
    cal.write_calibration(out, params, rows, evals, start=start)
    click.echo(f"wrote {out} ({evals} evaluations)")
    click.echo(" ".join(f"{k}={v:g}" for k, v in params.items()))
    for r in rows:
        click.echo(
            f"  {r['profile']:12} {r['label']:4} {r['metric']:20} target "
            f"{r['target']:9.1f} sim {_fmt(r['simulated'], '9.1f')} "
            f"err {_fmt(None if r['rel_error'] is None else 100 * r['rel_error'], '+6.1f')}%"
        )
    calibration = load_calibration(out)
    for arm in ("hisparse384", "offload512", "hisparse384-nomtp", "offload512-nomtp"):
        click.echo(f"{arm}: occupancy / tok/s/user / tput per GPU")
        for label, m in cal.predict(arm, {}, calibration=calibration).items():
            click.echo(
                f"  {label:4} {_fmt(m.get('occupancy'), '6.1f')} "
                f"{_fmt(m.get('interactivity'), '7.1f')} "
                f"{_fmt(m.get('throughput_per_gpu'), '7.0f')}"
            )


@simulate.command("parity")
@path_option(
    "--fit",
    "fit_run",
    exists=True,
    file_okay=False,
    required=True,
    help="An unpressured real CPU run (with a c1 point) to fit the step cost on.",
)
@path_option(
    "--run",
    "real_run",
    exists=True,
    file_okay=False,
    required=True,
    help="The real CPU run to predict (its profile and sweep, from its manifest).",
)
@path_option(
    "--out", file_okay=False, help="Parent of the simulated run directory [default: results/]."
)
@text_option("--run-id", help="Run directory name [default: sim-RUN].")
@click.option(
    "--pace",
    type=click.Choice(["point", "fit"]),
    default="point",
    show_default=True,
    help="point: replay each measured point at its own pace (its server's decode and prefill "
    "times and out-of-engine time), so the machine's load of the moment is not what is judged; "
    "fit: the fitted step cost throughout.",
)
@click.option(
    "--seeds",
    type=click.IntRange(min=0),
    default=16,
    show_default=True,
    help="Also replay the run this many times with each request's out-of-engine time drawn "
    "around its mean, with the spread of the fit run's c1 latencies, and predict the "
    "preemptions as the replays' mean (0: the one replay at the mean times).",
)
@click.option(
    "--stalls/--no-stalls",
    default=True,
    show_default=True,
    help="In the seeded replays, also draw the pauses every stream of a point saw at once "
    "(measured per point from the client's inter-token gaps): a reply ending in one reaches "
    "its client at its end, so the next turns are sent together.",
)
def parity(
    fit_run: Path,
    real_run: Path,
    out: Path | None,
    run_id: str | None,
    pace: str,
    seeds: int,
    stalls: bool,
) -> None:
    """Predict a real CPU run from a step cost fitted on another (CPU parity, issue 12).

    Prints the engine occupancy (the verdict's), the gauge's occupancy, waiting and
    preemptions per point, predicted beside measured, with the static limit, and each point's
    pace; `repro report RUN --predicted SIMRUN` shows the same in the dashboard.

    \b
    Example:
      repro simulate parity --fit results/cpu-tiny-base --run results/cpu-tiny-pressure-x
    """
    from harness.paths import results_dir
    from harness.sim.parity_run import (
        format_rows,
        pace_lines,
        parity_rows,
        predict_run,
        target_misses,
    )

    paced = pace == "point"
    sim_dir = predict_run(
        fit_run, real_run, out or results_dir(), run_id, paced=paced, seeds=seeds, stalls=stalls
    )
    rows = parity_rows(real_run, sim_dir)
    click.echo(format_rows(rows))
    if paced:
        click.echo("paces (x the fitted step cost):")
        for line in pace_lines(sim_dir):
            click.echo(line)
    for miss in target_misses(rows):
        click.echo(f"  outside the parity targets: {miss}")
    click.echo(str(sim_dir))


@simulate.command("trace-check")
@path_option(
    "--trace", "trace", exists=True, dir_okay=False, required=True, help="A scheduler trace."
)
@click.option(
    "--show",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="Print this many divergent steps.",
)
def trace_check(trace: Path, show: int) -> None:
    """Replay a real vLLM scheduler trace through the simulator's scheduler, step by step.

    The trace comes from a server started with the tracing scheduler (`repro sweep ...
    --set serve.scheduler-cls=repro_sched_trace.TracingScheduler` and the two env overrides
    `harness/serve/sched_trace.py` names; `benchmarks/bench_sim_parity_wide.py --trace` adds
    them). Requests enter and steps end when vLLM's did, so what is compared is the scheduling
    alone: each step's tokens per request and its preemptions. Exits 1 if any step differs.

    \b
    Example:
      repro simulate trace-check --trace results/p16-trace.jsonl
    """
    from harness.sim.trace_check import check_trace

    result = check_trace(trace, keep=show)
    click.echo(result.summary())
    for divergence in result.divergences:
        click.echo("  " + divergence.describe(result.names))
    if not result.exact:
        raise SystemExit(1)
