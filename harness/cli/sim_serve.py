"""CLI wiring for `repro sim serve` (logic in harness.sim.serve)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import click

from harness.cli.options import PORT, FiniteFloat, flag, overrides_option, path_option, text_option
from harness.errors import ReproError

# Ranges of the numeric options. A time scale of 0 or less has no meaning (time stands or runs
# back); above 100 the engine thread cannot keep pace with virtual time on any machine the
# harness targets (bench_simserve: K=4 already moves c8 occupancy by a third).
TIME_SCALE = FiniteFloat(100.0, above=0.0)
FRACTION = FiniteFloat(1.0, minimum=0.0)  # a rate: the share of requests or streams hit
SECONDS = FiniteFloat(30 * 86400.0, minimum=0.0)  # at most 30 days, never negative


def register(group: click.Group) -> None:
    group.add_command(sim)


@click.group("sim")
def sim() -> None:
    """The simulated engine as a server (real clients drive it)."""


@sim.command("serve")
@click.option("--profile", required=True, metavar="NAME", help="Serve profile to simulate.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=PORT)
@click.option(
    "--time-scale",
    "time_scale",
    default=None,
    type=TIME_SCALE,
    metavar="K",
    help="Virtual time runs K x faster than the wall clock [default: 2].",
)
@text_option(
    "--dataset",
    metavar="RECIPE|FILE",
    help="Dataset whose tokenizer counts prompts [default: openhands-offline].",
)
@text_option(
    "--tokenizer",
    metavar="SPEC",
    help="Tokenizer spec (overrides the dataset's), e.g. tiny:tokenizer.",
)
@path_option(
    "--calibration",
    dir_okay=False,
    help="Simulator calibration file, or none for the roofline defaults [default: the one fitted for the profile's model and GPU, as repro simulate].",
)
@overrides_option("serve. profile override, or sim.PARAM=VALUE (repeatable).")
@flag(
    "--reasoning-field", help="Stream the reply as delta.reasoning (vLLM with a reasoning parser)."
)
@path_option(
    "--request-log",
    dir_okay=False,
    help="Append one JSON line per finished request (virtual arrival/first-token/end times, "
    "prompt, cached and output tokens): the server's side of each request.",
)
@click.option("--fail-rate", default=0.0, type=FRACTION, help="Fraction of requests -> HTTP 500.")
@click.option(
    "--truncate-rate",
    default=0.0,
    type=FRACTION,
    help="Fraction of streams cut after half their tokens.",
)
@click.option(
    "--metrics-hang-after",
    "metrics_hang_after_s",
    default=None,
    type=SECONDS,
    metavar="S",
    help="/metrics stops answering S wall seconds after start.",
)
@click.option(
    "--die-after",
    "die_after_s",
    default=None,
    type=SECONDS,
    metavar="S",
    help="The process exits (code 3) S wall seconds after start.",
)
@click.option(
    "--die-after-requests",
    default=None,
    type=click.IntRange(min=0),
    metavar="N",
    help="The process exits (code 3) when stream N+1 arrives (deterministic, unlike --die-after).",
)
@click.option(
    "--metrics-hang-after-requests",
    default=None,
    type=click.IntRange(min=0),
    metavar="N",
    help="/metrics stops answering once N streams have started.",
)
@click.option(
    "--faults-after-requests",
    "after_requests",
    default=0,
    type=click.IntRange(min=0),
    metavar="N",
    help="Request faults start after N streams.",
)
@click.option(
    "--faults-after",
    "after_s",
    default=0.0,
    type=SECONDS,
    metavar="S",
    help="Request faults start S wall seconds after start.",
)
def serve_cmd(host: str, port: int, **options: Any) -> None:
    """Serve PROFILE's simulated engine: /health, /v1/models, /v1/chat/completions, /metrics.

    Times inside the engine are virtual; a client measuring wall time must multiply by K.
    """
    from harness.sim.serve.faults import Faults
    from harness.sim.serve.server import DEFAULT_TIME_SCALE, ServeOptions, serve

    # The fault options are named after Faults' fields, the rest after ServeOptions'.
    faults = Faults(**{f.name: options.pop(f.name) for f in fields(Faults)})
    if options["time_scale"] is None:  # `or` would turn a given 0 into the default
        options["time_scale"] = DEFAULT_TIME_SCALE
    try:
        serve(ServeOptions(**options, faults=faults), host=host, port=port, echo=click.echo)
    except OSError as exc:
        if exc.filename is not None:  # a file: harness.cli.main names it
            raise
        # binding: a host that does not resolve, a busy port ("Name or service not known" alone)
        raise ReproError(f"--host {host} --port {port}: cannot serve there ({exc})") from None
