"""CLI wiring for the launch area: builds, profiles, launching a server."""

from __future__ import annotations

import json

import click
import yaml

from harness.cli.options import PORT, flag


def register(group: click.Group) -> None:
    """Add this area's commands to the `repro` group."""
    group.add_command(builds_group)
    group.add_command(build_cmd)
    group.add_command(profiles_group)
    group.add_command(launch_cmd)


set_option = click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a profile value, e.g. serve.max-num-seqs=64 or sweep.max_tokens=32 "
    "(VALUE is YAML; serve.KEY=null removes the key). Repeatable.",
)


@click.group("builds")
def builds_group() -> None:
    """Pinned vLLM builds declared in launch/builds.yaml."""


@builds_group.command("list")
def builds_list() -> None:
    """List the declared builds, their kind, device and whether they are installed."""
    from harness.serve.builds import build_dir, load_builds

    for name, build in load_builds().items():
        pin = build.package or (f"{build.repo}@{build.commit}" if build.commit else build.repo)
        state = "installed" if (build_dir(name) / "provenance.json").exists() else "-"
        click.echo(f"{name:34} {build.kind:13} {build.device:5} {state:9} {pin}")


@click.command("build")
@click.argument("name")
@flag("--dry-run", help="Print the exact install steps; install nothing.")
def build_cmd(name: str, dry_run: bool) -> None:
    """Install build NAME into its own venv under $REPRO_CACHE/builds (once; reused after).

    NAME is a key of launch/builds.yaml, or nightly@<40-hex sha> / nightly@latest.
    """
    from harness.serve.builds import ensure_build, install_plan

    if dry_run:
        for line in install_plan(name):
            click.echo(line)
        return
    env = ensure_build(name, echo=click.echo)
    click.echo(f"ready {env.name}: {env.vllm} ({env.provenance.get('vllm_version_output')})")


@click.group("profiles")
def profiles_group() -> None:
    """Serve profiles in launch/profiles/*.yaml."""


@profiles_group.command("list")
def profiles_list() -> None:
    """List profiles: name, build, GPUs needed, model."""
    from harness.serve.profiles import list_profiles

    for profile in list_profiles():
        click.echo(f"{profile.name:28} {profile.build:32} gpus={profile.gpus:<2} {profile.model}")


@profiles_group.command("show")
@click.argument("name")
@flag("--command", "command_only", help="Print only the exact `vllm serve ...` command line.")
@set_option
def profiles_show(name: str, command_only: bool, overrides: tuple[str, ...]) -> None:
    """Show profile NAME resolved (extends merged, overrides applied) and its command."""
    import shlex

    from harness.serve.profiles import load_profile, render_serve_command

    profile = load_profile(name, overrides)
    command = shlex.join(render_serve_command(profile))
    if command_only:
        click.echo(command)
        return
    data = json.loads(profile.model_dump_json())
    click.echo(yaml.safe_dump(data, sort_keys=False, width=100).rstrip())
    click.echo(f"command: {command}")


@profiles_group.command("check")
@click.argument("names", nargs=-1)
@flag("--all", "all_profiles", help="Check every shipped profile.")
@flag("--no-real", help="Table checks only; skip the installed vLLM's own parser.")
@flag("--json", "as_json", help="Print the checks as JSON.")
def profiles_check(names: tuple[str, ...], all_profiles: bool, no_real: bool, as_json: bool) -> int:
    """Render each profile's command and validate it: the release's option table, and the real
    vLLM argparser + config classes where a build of the same release is installed.

    Exit status 1 if any check fails (warnings do not fail).
    """
    from harness.serve.validate import all_profile_names, check_profiles

    if all_profiles == bool(names):
        raise click.UsageError("give profile NAME(s) or --all")
    reports = check_profiles(list(names) or all_profile_names(), real=not no_real)
    if as_json:
        data = [
            {"profile": r.name, "build": r.build, "checks": [c.as_dict() for c in r.checks]}
            for r in reports
        ]
        click.echo(json.dumps(data, indent=2))
    else:
        for report in reports:
            click.echo(f"{'FAIL' if report.failed else 'ok':4} {report.name} ({report.build})")
            for check in report.checks:
                click.echo(f"     {check.line()}")
    return 1 if any(r.failed for r in reports) else 0


@click.command("launch")
@click.option("--profile", "profile_name", required=True, help="Profile name or YAML path.")
@click.option("--port", type=PORT, default=None, help="Port (default: the profile's).")
@click.option(
    "--log-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Where the server log and launch record go (default: a new folder under "
    "$REPRO_CACHE/launches).",
)
@set_option
def launch_cmd(
    profile_name: str, port: int | None, log_dir: str | None, overrides: tuple[str, ...]
) -> None:
    """Start the profile's vLLM server, print `ready <base-url>`, serve until Ctrl-C/SIGTERM.

    The server runs in its own process group, logs to a file, and is torn down (SIGINT, then
    SIGTERM, then SIGKILL of the whole group) on exit, Ctrl-C, SIGTERM or an error.
    """
    from pathlib import Path

    from harness.serve.server import serve_until_signalled

    serve_until_signalled(
        profile_name,
        port=port,
        overrides=overrides,
        log_dir=Path(log_dir) if log_dir else None,
        echo=click.echo,
    )
