"""CLI wiring for the tiny local models (owned by harness/tiny)."""

from __future__ import annotations

from pathlib import Path

import click

from harness.cli.options import path_option

DEFAULT_BUILD = "cpu-0.32.0"


@click.group("model")
def model_group() -> None:
    """Tiny deterministic local models for the CPU profiles (no hub access).

    Models are random-weight, built with the build venv's torch; the tokenizer is a byte-level
    BPE trained on this interpreter's standard library. Same inputs give identical files.
    Profiles whose model is `tiny:<name>` build them on first use.
    """


@model_group.command("list")
def list_models() -> None:
    """List the tiny models `repro model build` can make, with their architecture."""
    from harness.serve.tiny.models import MODEL_SPECS

    for name, spec in MODEL_SPECS.items():
        params = spec["params"]
        extra = (
            " + MTP layer (bigram: identity eh_proj, residual scale 0)" if params.get("mtp") else ""
        )
        click.echo(f"{name:<15} {spec['architecture']}{extra}")
    click.echo(f"{'tokenizer':<15} byte-level BPE, vocab 2048, ChatML template (`tiny:tokenizer`)")


@model_group.command("build")
@click.argument("name")
@path_option(
    "--out",
    "out",
    help="Write the model into this directory instead of the cache (must not exist or be empty).",
)
@click.option(
    "--build",
    "build",
    default=DEFAULT_BUILD,
    show_default=True,
    help="Build (launch/builds.yaml) whose python/torch makes the weights; installed on first use.",
)
def build_model_command(name: str, out: Path | None, build: str) -> None:
    """Build tiny model NAME (see `repro model list`), or `tokenizer`, and print its directory.

    Without --out the result lands in the cache ($REPRO_CACHE/models/...), where profiles
    find it; a second call reuses it.
    """
    from harness.dataset.tiny.tokenizer import build_tokenizer
    from harness.serve.tiny import ensure_tokenizer

    if name == "tokenizer":
        click.echo(str(_fresh_out(out, build_tokenizer) if out else ensure_tokenizer()))
        return

    from harness.serve.builds import ensure_build
    from harness.serve.tiny.models import build_model, ensure_model, model_spec

    model_spec(name)  # unknown names fail before installing anything
    env = ensure_build(build, echo=lambda line: click.echo(line, err=True))
    if out:
        path = _fresh_out(out, lambda target: build_model(name, env.python, target))
    else:
        path = ensure_model(name, env.python)
    click.echo(str(path))


def _fresh_out(out: Path, make) -> Path:
    from harness.errors import ConfigError

    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--out {out} exists and is not an empty directory")
    return make(out)


def register(group: click.Group) -> None:
    """Add this area's commands to the `repro` group."""
    group.add_command(model_group)
