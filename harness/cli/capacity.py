"""CLI wiring for `repro capacity` (logic in harness.capacity)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from harness.cli.options import GIB, flag, path_option, text_option

F = TypeVar("F", bound=Callable[..., Any])


def register(group: click.Group) -> None:
    """Add this area's commands to the `repro` group."""
    group.add_command(capacity)


# The calculator's numeric inputs, in --help order: (option, type, help). None is "not given":
# the model file or the run's profile supplies the value.
_NUMBERS: tuple[tuple[str, Any, str], ...] = (
    ("--hbm-gib", GIB, "GPU memory in GiB instead of --gpu."),
    ("--tp", click.IntRange(min=1), "Tensor parallel size [default: 8]."),
    ("--dp", click.IntRange(min=1), "Data parallel size [default: 1]."),
)
_SIZES: tuple[tuple[str, Any, str], ...] = (
    ("--hot-rows", int, "Hot-buffer rows of the calculator figure [default: 2 x top-K = 4096]."),
    (
        "--spec-tokens",
        int,
        (
            "Speculative (MTP) tokens: adds a figure with hot rows = (K + 2) x top-K "
            "(vLLM's device_buffer_size default; the calculator has no MTP input)."
        ),
    ),
    (
        "--host-pool-gib",
        GIB,
        (
            "HiSparse host pool per DP rank [default: the minimum non-limiting pool, "
            "clamped to 16..4096, as the calculator]."
        ),
    ),
    (
        "--indexer-offload-gib",
        GIB,
        "Native indexer offload pool, total GiB (0 = off) [default: 128].",
    ),
    ("--system-ram-gib", GIB, "System RAM budget for host pools [default: 4096]."),
)
_LIMITS: tuple[tuple[str, Any, str], ...] = (
    ("--max-seqs", int, "Max sequences per DP rank [default: 1024, the calculator's]."),
    (
        "--kv-gib-per-gpu",
        GIB,
        "Available KV HBM per GPU, overriding the estimate (e.g. vLLM's log value).",
    ),
    ("--baseline-block-bytes", int, "Advanced: baseline block bytes."),
    ("--hisparse-block-bytes", int, "Advanced: HiSparse GPU page bytes."),
    ("--host-block-bytes", int, "Advanced: host block bytes."),
    ("--baseline-block-tokens", int, "Advanced: baseline block tokens."),
    ("--gpu-block-tokens", int, "Advanced: GPU block tokens."),
    ("--host-block-tokens", int, "Advanced: host block tokens."),
    ("--groups", int, "Advanced: hot/resident groups."),
    ("--retained-pages", int, "Advanced: retained pages per group."),
    ("--other-gpu-blocks", int, "Advanced: other GPU blocks per request."),
    (
        "--bar-concurrency",
        int,
        "Requests per DP group for the memory bars [default: the HiSparse limit].",
    ),
)


def _numbers(table: tuple[tuple[str, Any, str], ...]) -> Callable[[F], F]:
    """Decorate with one optional option per row of ``table``, in the table's order."""

    def apply(func: F) -> F:
        for name, kind, text in reversed(table):
            func = click.option(name, type=kind, default=None, help=text)(func)
        return func

    return apply


@click.command(
    "capacity",
    epilog=(
        "Examples:\n\n"
        "  repro capacity --gpu h200 --tp 8 --seq-len 142000 --spec-tokens 3\n\n"
        "  repro capacity --seq-range 8192:1048576:65536 --json\n\n"
        "  repro capacity --plot capacity.html\n\n"
        "  repro capacity --run results/<run-id>\n\n"
        "JSON (--json): a list with one object per sequence length holding seq_len, "
        "baseline_requests and hisparse_requests (totals over DP), multiplier (a number, the "
        'string "inf" when only HiSparse serves the length, or null when neither does), '
        "min_host_pool_gib (per DP rank, whole GiB), kv_gib_per_gpu, weights_gib_per_gpu, the "
        'per-DP limits, memory composition, and "mtp" (null without --spec-tokens). With '
        "--run, one object with the deployment, workload, capacity rows and per-point comparison."
    ),
)
@text_option(
    "--model",
    "model",
    metavar="NAME|FILE",
    help="Capacity model: launch/models/NAME.yaml or a YAML path [default: glm-5.3; with --run, the run's model].",
)
@click.option(
    "--gpu",
    type=click.Choice(["h200", "b200", "b300"], case_sensitive=False),
    default=None,
    help="GPU preset (141 / 180 / 288 GB) [default: h200].",
)
@_numbers(_NUMBERS)
@text_option(
    "--ep/--no-ep", help="Shard routed experts across DP x TP (expert parallelism) [default: on]."
)
@click.option(
    "--kv-dtype",
    type=click.Choice(["fp8", "bf16"]),
    default=None,
    help="KV-cache dtype; swaps all three block sizes [default: fp8].",
)
@click.option(
    "--seq-len",
    "seq_lens",
    type=int,
    multiple=True,
    help="Sequence length in tokens (repeatable) [default: 81920].",
)
@text_option(
    "--seq-range",
    metavar="START:STOP:STEP",
    help="Sequence lengths START..STOP (inclusive) every STEP tokens.",
)
@_numbers(_SIZES)
@click.option(
    "--share-host/--no-share-host",
    default=True,
    show_default=True,
    help="One host pool per DP rank shared by its TP ranks (else one per rank).",
)
@_numbers(_LIMITS)
@flag("--json", "as_json", help="Print JSON instead of text.")
@path_option("--plot", dir_okay=False, help="Write the charts to a standalone offline HTML file.")
@path_option(
    "--run", "run_dir", help="Predicted vs measured: read a run directory's profile and workload."
)
def capacity(**options: object) -> None:
    """HiSparse concurrency calculator: requests that fit with and without HiSparse.

    Reproduces the blog's calculator exactly (baseline = GPU-resident KV limit, HiSparse limit,
    multiplier, minimum host pool per DP rank, weights and KV per GPU, memory composition), adds
    the MTP-aware figure the calculator cannot show (--spec-tokens), reads other sparse-MLA
    models from launch/models/, and compares a run's measured occupancy with the prediction.
    """
    from harness.capacity.command import run_capacity

    text = run_capacity(dict(options), echo=lambda message: click.echo(message, err=True))
    click.echo(text)
