"""CLI wiring for `repro doctor`: a preflight of this machine for a profile."""

from __future__ import annotations

import json

import click

from harness.cli.options import PORT, flag, text_option


def register(group: click.Group) -> None:
    group.add_command(doctor_cmd)


@click.command("doctor")
@click.option("--profile", "profile_name", default="cpu-tiny", show_default=True,
              help="Profile name or YAML path.")  # fmt: skip
@click.option("--port", type=PORT, default=None, help="Port to check (default: the profile's).")
@text_option("--url", help="Attach mode: check only what the client side needs.")
@flag("--json", "as_json", help="Print the checks as JSON.")
def doctor_cmd(profile_name: str, port: int | None, url: str | None, as_json: bool) -> int:
    """Check this machine for PROFILE: GPUs, driver, pinned host RAM vs the profile's pools,
    /dev/shm, disk, the build, the port, and the hub (model, tokenizer, datasets).

    Each check is ok/warn/fail/skip; a failing one says what to do. Exit status 1 on any fail.
    """
    from harness.serve.doctor import preflight, url_check
    from harness.serve.profiles import load_profile

    profile = load_profile(profile_name)
    checks = ([url_check(url)] if url is not None else []) + preflight(profile, url=url, port=port)
    failed = [c for c in checks if c.status == "fail"]
    if as_json:
        data = {"profile": profile_name, "ok": not failed, "checks": [c.as_dict() for c in checks]}
        click.echo(json.dumps(data, indent=2))
    else:
        for check in checks:
            click.echo(check.line())
        click.echo(f"{len(failed)} failing check(s)" if failed else "all checks pass")
    return 1 if failed else 0
