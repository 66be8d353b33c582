"""CLI wiring for the cluster area: `repro runs cancel` and `repro k8s render`."""

from __future__ import annotations

from pathlib import Path

import click

from harness.cluster.k8s import DEFAULT_HARNESS_IMAGE, DEFAULT_IMAGE, apply_hint, render, write
from harness.cluster.runs import cancel_run, job_cell
from harness.serve.profiles import load_profile


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
def k8s_render(
    profile: str,
    image: str,
    harness_image: str,
    overrides: tuple[str, ...],
    results_claim: str,
    results_size: str,
    out: Path | None,
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
    )
    folder = out or Path("k8s") / prof.name
    for path in write(manifests, folder):
        click.echo(f"wrote {path}")
    click.echo(f"apply on a cluster: {apply_hint(folder)}")
