"""CLI wiring for `repro coherence`: judge one arm's outputs (exit 0 coherent, 1 not, 2 unsure)."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import click

from harness.cli.options import PORT, flag, overrides_option, path_option, text_option

if TYPE_CHECKING:  # the command imports its stages when it runs (the CLI starts fast)
    from harness.results import CoherenceRecord
    from harness.serve.profiles import Profile

EXIT = {"coherent": 0, "incoherent": 1, "unjudged": 2}


def register(group: click.Group) -> None:
    """Add this area's commands to the `repro` group."""
    group.add_command(coherence)


@click.command()
@click.option("--profile", "profile_name", required=True, help="Profile name or YAML path.")
@text_option("--url", help="Probe this running server instead of launching one.")
@text_option(
    "--against",
    metavar="PROFILE|RUN",
    help="Compare with this arm's recorded replies, or a run directory's (default: the profile's coherence.reference).",
)
@overrides_option(
    "Override a profile value (serve.KEY, coherence.KEY, model=...; VALUE is YAML; serve.KEY=null removes). Repeatable."
)
@flag("--record", help="Store the replies as this arm's reference.")
@path_option(
    "--references", file_okay=False, help="Reference store (default: launch/coherence/references)."
)
@flag("--no-long-context", help="Skip the long-context needle probe.")
@click.option("--port", type=PORT, default=None, help="Port of a launched server.")
@flag("--dry-run", help="Resolve probe set and reference; probe nothing.")
@flag("--json", "as_json", help="Print the result record as JSON.")
def coherence(
    profile_name: str,
    url: str | None,
    against: str | None,
    overrides: tuple[str, ...],
    record: bool,
    references: Path | None,
    no_long_context: bool,
    port: int | None,
    dry_run: bool,
    as_json: bool,
) -> int:
    """Send the profile's versioned greedy probe set and judge the replies: token agreement
    with the reference arm, garbage signatures, checkable answers, MTP acceptance band and
    the long-context needle. Exit 0 coherent, 1 incoherent, 2 could not judge.

    \b
    Examples:
      repro coherence --profile cpu-tiny-mtp-nomtp --record
      repro coherence --profile cpu-tiny-mtp
      repro coherence --profile hisparse384 --url http://gpu-node:8000 --json
      repro coherence --profile cpu-tiny-mtp --against results/cpu-tiny-mtp-nomtp-20261201-0900
    """
    from harness.coherence import plan_check, run_check
    from harness.serve.profiles import load_profile

    profile = load_profile(profile_name, overrides)
    plan = plan_check(profile, against=against, references_dir=references)
    if dry_run:
        for line in plan.lines():
            click.echo(line)
        return 0
    judge = partial(
        run_check,
        against=against,
        references_dir=references,
        record=record,
        long_context=not no_long_context,
    )
    result = judge(profile, url) if url else _launched(profile, port, judge)
    if as_json:
        click.echo(json.dumps(result.model_dump(mode="json"), indent=2))
    else:
        click.echo(f"{result.verdict}: {result.reason}")
        for name, check in result.checks.items():
            click.echo(f"  {name}: {check['status']}: {check['reason']}")
    return EXIT[result.verdict]


def _launched(
    profile: Profile, port: int | None, judge: Callable[[Profile, str], CoherenceRecord]
) -> CoherenceRecord:
    import tempfile

    from harness.paths import cache_dir
    from harness.serve.server import VllmServer

    parent = cache_dir() / "launches"  # where `repro launch` keeps its server logs too
    parent.mkdir(parents=True, exist_ok=True)
    logs = Path(tempfile.mkdtemp(prefix=f"coherence-{profile.name}-", dir=parent))
    click.echo(f"starting vLLM for {profile.name}; log {logs / 'server.log'}", err=True)
    with VllmServer(profile, log_path=logs / "server.log", port=port) as server:
        return judge(profile, server.base_url)
