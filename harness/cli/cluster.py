"""CLI wiring for the cluster area: `repro runs cancel` and `repro k8s render`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from harness.cluster.k8s import DEFAULT_HARNESS_IMAGE, DEFAULT_IMAGE, apply_hint, render, write
from harness.cluster.options import SlurmOptions, slurm_options
from harness.cluster.runs import cancel_run, job_cell
from harness.serve.profiles import load_profile

_EXECUTOR_OPTIONS = [
    click.option(
        "--executor",
        type=click.Choice(["local", "slurm"]),
        default="local",
        show_default=True,
        help="local: run here; slurm: one Slurm job runs this sweep on a node (see --slurm-*).",
    ),
    click.option(
        "--slurm-partition", default=None, help="slurm: partition (default: the cluster's)."
    ),
    click.option(
        "--slurm-gres",
        default=None,
        metavar="gpu:N|none",
        help="slurm: generic resources (default gpu:<profile gpus>; none for a CPU profile).",
    ),
    click.option(
        "--slurm-time",
        default=None,
        metavar="HH:MM:SS",
        help="slurm: time limit (Slurm's formats).",
    ),
    click.option("--slurm-account", default=None, help="slurm: account to charge."),
    click.option(
        "--slurm-setup",
        multiple=True,
        metavar="LINE",
        help="slurm: shell line run in the job before the sweep (repeatable), "
        "e.g. 'module load cuda'.",
    ),
    click.option(
        "--slurm-config",
        type=click.Path(path_type=Path, exists=True, dir_okay=False),
        default=None,
        help="slurm: YAML with partition/account/time/gres/cpus_per_task/setup (options win).",
    ),
]
_SLURM_KEYS = ("partition", "gres", "time", "account", "setup", "config")


def executor_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """`--executor local|slurm` and the `--slurm-*` options, for sweep and nightly."""
    for option in reversed(_EXECUTOR_OPTIONS):
        command = option(command)
    return command


def options_from(executor: str, given: dict[str, Any]) -> SlurmOptions | None:
    """The Slurm settings (None for --executor local); --slurm-* without slurm is an error."""
    values = {key: given.pop(f"slurm_{key}", None) for key in _SLURM_KEYS}
    if executor == "local":
        named = [f"--slurm-{k}" for k, v in values.items() if v not in (None, ())]
        if named:
            raise click.UsageError(f"{', '.join(named)}: only with --executor slurm")
        return None
    return slurm_options(**{**values, "setup": values["setup"] or ()})


def register(group: click.Group) -> None:
    """Add this area's commands to the `repro` group (`runs cancel` joins `runs`)."""
    runs = group.commands.get("runs")
    if isinstance(runs, click.Group):
        runs.add_command(runs_cancel)
    group.add_command(k8s)


@click.command("cancel")
@click.argument("run")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Folder holding run directories (default: results/ or REPRO_RESULTS).",
)
def runs_cancel(run: str, out: Path | None) -> None:
    """Cancel the Slurm job of RUN (a run directory or id, queued or running) and wait until it
    stopped; the run is then partial: continue it with `repro sweep --resume RUN`, here or
    with --executor slurm."""
    record = cancel_run(run, out=out, echo=click.echo)
    click.echo(f"{record.run_id}: {job_cell(record)}")
    if Path(record.run_dir, "manifest.json").is_file():
        click.echo(f"resume: repro sweep --resume {record.run_dir} [--executor slurm]")
    else:
        click.echo("the job had not started: nothing was written")


@click.group()
def k8s() -> None:
    """Kubernetes manifests for a sweep (rendered here, applied by you with kubectl)."""


@k8s.command("render")
@click.option("--profile", "profile", required=True, help="Profile name or YAML path.")
@click.option("--image", default=DEFAULT_IMAGE, show_default=True, help="vLLM server image.")
@click.option(
    "--harness-image",
    default=DEFAULT_HARNESS_IMAGE,
    show_default=True,
    help="Image with this harness (runs `repro sweep --url` in the Job).",
)
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="As in sweep.")
@click.option("--results-claim", default="repro-results", show_default=True, help="PVC name.")
@click.option("--results-size", default="100Gi", show_default=True, help="PVC size.")
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Folder for the manifests (default: k8s/<profile>).",
)
@click.option(
    "--allow-incoherent",
    is_flag=True,
    help="As in sweep: render (and count the points) even with no recorded coherence reference.",
)
def k8s_render(
    profile: str,
    image: str,
    harness_image: str,
    overrides: tuple[str, ...],
    results_claim: str,
    results_size: str,
    out: Path | None,
    allow_incoherent: bool,
) -> None:
    """Write the results volume, the vLLM server pod + service (GPUs from the profile) and the
    sweep Job. Not applied: `kubectl apply -f OUT` on your cluster."""
    prof = load_profile(profile, overrides)
    manifests = render(
        prof,
        image=image,
        harness_image=harness_image,
        overrides=list(overrides),
        claim=results_claim,
        size=results_size,
        allow_incoherent=allow_incoherent,
        echo=click.echo,
    )
    folder = out or Path("k8s") / prof.name
    for path in write(manifests, folder):
        click.echo(f"wrote {path}")
    click.echo(f"apply on a cluster: {apply_hint(folder)}")
