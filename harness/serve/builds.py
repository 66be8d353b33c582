"""Pinned vLLM builds: declared in launch/builds.yaml, each installed into its own venv.

A build is installed once into `cache_dir()/builds/.store/<name>-<stamp>/` and published by
atomically pointing the symlink `cache_dir()/builds/<name>` at it, so a failed or interrupted
install leaves nothing under the build's name (a venv cannot be renamed: its scripts carry
absolute paths). A per-build file lock serialises concurrent installers (tests, other users).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, model_validator

from harness import env as harness_env
from harness.config import read_yaml, validate
from harness.errors import BuildError, ConfigError
from harness.paths import BUILDS_FILE, cache_dir
from harness.serve.installer import (  # noqa: F401 - re-exported (tests, callers)
    CPU_EXTRA_INDEX_ENV,
    FULL_SHA,
    WHEEL_INDEX,
    Step,
    _Installer,
    _output,
    _prebuilt_wheel,
    _quiet_env,
    build_dir,
)
from harness.serve.options import OptionTable, option_table

SHORT_SHA = re.compile(r"^[0-9a-f]{7,39}$")


class Build(BaseModel, extra="forbid"):
    name: str
    description: str = ""
    kind: Literal["pypi-cpu", "pypi", "commit-wheel", "source", "nightly"]
    device: Literal["cpu", "cuda"]
    python: str
    package: str | None = None
    vllm_version: str | None = None
    serve_options: str = "0.32.0"
    extra_serve_options: dict[str, str] = {}
    extra_json_schemas: dict[str, dict] = {}  # a fork's recorded keys inside JSON options
    extra_index_urls: list[str] = []
    remove: list[str] = []
    repo: str | None = None
    branch: str | None = None
    commit: str | None = None
    prebuilt_wheel: str | None = None
    build_env: dict[str, str] = {}

    @model_validator(mode="after")
    def _check_kind(self) -> Build:
        needs = {
            "pypi-cpu": ("package",),
            "pypi": ("package",),
            "commit-wheel": ("repo", "commit"),
            "source": ("repo", "commit"),
            "nightly": ("repo",),
        }[self.kind]
        for key in needs:
            if not getattr(self, key):
                raise ValueError(f"kind {self.kind!r} needs `{key}`")
        if (
            self.commit
            and self.commit != "latest"
            and not SHORT_SHA.match(self.commit)
            and not FULL_SHA.match(self.commit)
        ):
            raise ValueError(f"commit {self.commit!r} is not a hex git SHA (7-40 characters)")
        if self.vllm_version and self.serve_options != self.vllm_version:
            raise ValueError(
                f"serve_options {self.serve_options!r} differs from vllm_version "
                f"{self.vllm_version!r}: validate against that release's own table"
            )
        if self.kind != "source" and (self.extra_serve_options or self.extra_json_schemas):
            raise ValueError(
                f"kind {self.kind!r} is upstream vLLM: fork-only options "
                "(extra_serve_options / extra_json_schemas) need a `source` fork build"
            )
        return self

    @property
    def has_full_commit(self) -> bool:
        return bool(self.commit and FULL_SHA.match(self.commit))


@dataclass
class BuildEnv:
    name: str
    venv: Path
    python: Path
    vllm: Path
    provenance: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Declarations


def load_builds(path: Path = BUILDS_FILE) -> dict[str, Build]:
    try:
        return dict(_load_builds(path, path.stat().st_mtime_ns))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read builds: {exc}") from exc


@functools.lru_cache(maxsize=4)
def _load_builds(path: Path, _mtime_ns: int) -> dict[str, Build]:
    raw = read_yaml(path, "builds file")
    if not isinstance(raw, dict) or set(raw) != {"builds"} or not isinstance(raw["builds"], dict):
        raise ConfigError(f"{path}: expected one top-level key `builds:` mapping names to builds")
    builds: dict[str, Build] = {}
    for name, body in raw["builds"].items():
        if not isinstance(body, dict):
            raise ConfigError(f"{path}: builds.{name}: expected a mapping")
        builds[name] = validate(Build, body, path, prefix=f"builds.{name}", name=name)
    return builds


def get_build(name: str) -> Build:
    """A declared build, or `nightly@<sha>` / `nightly@latest` made from the `nightly` template."""
    builds = load_builds()
    if name in builds:
        if builds[name].kind == "nightly":
            raise ConfigError(
                f"build {name!r} is a template: use `{name}@<40-hex sha>` or `{name}@latest`"
            )
        return builds[name]
    base, sep, ref = name.partition("@")
    if sep and base in builds and builds[base].kind == "nightly":
        if ref != "latest" and not FULL_SHA.match(ref):
            raise ConfigError(
                f"build {name!r}: the per-commit wheel index needs the full "
                f"40-character SHA (or `latest`), got {ref!r}"
            )
        return builds[base].model_copy(update={"name": name, "commit": ref})
    raise ConfigError(
        f"unknown build {name!r} (not in {BUILDS_FILE}; known: {', '.join(sorted(builds))})"
    )


# ---------------------------------------------------------------------------------------------
# Plans


def _stage_dir(name: str) -> Path:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return cache_dir() / "builds" / ".store" / f"{name}-{stamp}-{os.getpid()}"


def install_plan(name: str) -> list[str]:
    """The exact install steps for `repro build NAME --dry-run` (works without CUDA)."""
    build = get_build(name)
    installer = _Installer(build, _stage_dir(name))
    lines = [
        f"# build {name}: {build.description.strip()}",
        f"# staging dir {installer.stage}; published as {build_dir(name)}",
        f"# lock {_lock_path(name)}",
    ]
    for step in installer.steps():
        lines.append(step.render())
    return lines


# ---------------------------------------------------------------------------------------------
# Installing


def _lock_path(name: str) -> Path:
    return cache_dir() / "builds" / f".{name}.lock"


@contextmanager
def _locked(name: str, echo: Callable[[str], None]) -> Iterator[None]:
    path = _lock_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            echo(f"waiting for another install of {name} ({path})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _installed(name: str) -> BuildEnv | None:
    root = build_dir(name)
    prov = root / "provenance.json"
    python = root / "venv" / "bin" / "python"
    if not (prov.exists() and python.exists()):
        return None
    return BuildEnv(
        name=name,
        venv=root / "venv",
        python=python,
        vllm=root / "venv" / "bin" / "vllm",
        provenance=json.loads(prov.read_text()),
    )


def nvidia_gpu_count() -> int:
    if not shutil.which("nvidia-smi"):
        return 0
    proc = subprocess.run(
        ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
        check=False,
        capture_output=True,
        text=True,
    )
    return len(proc.stdout.split()) if proc.returncode == 0 else 0


def _check_machine(build: Build) -> None:
    if build.device == "cuda" and nvidia_gpu_count() == 0:
        raise BuildError(
            f"build {build.name} needs CUDA and an NVIDIA GPU; this machine has none. "
            f"`repro build {build.name} --dry-run` prints the steps; install it on a GPU machine "
            "or attach to a running server with --url"
        )
    if build.device == "cuda" and not shutil.which("uv"):
        raise BuildError(
            f"build {build.name} installs with uv (the per-commit wheel index "
            "is unsupported by pip); install uv first"
        )
    if (
        build.kind == "source"
        and not _prebuilt_wheel(build)
        and not (harness_env.text("CUDA_HOME") or shutil.which("nvcc"))
    ):
        raise BuildError(
            f"build {build.name} is a source build with CUDA kernels: set CUDA_HOME "
            f"(nvcc) or give a prebuilt wheel (builds.{build.name}.prebuilt_wheel)"
        )


def _run_step(step: Step, log: Path, echo: Callable[[str], None]) -> None:
    echo(f"+ {step.render()}")
    if step.action is not None:
        step.action()
        return
    assert step.argv is not None
    with open(log, "a") as out:
        out.write(f"\n$ {step.render()}\n")
        out.flush()
        try:
            proc = subprocess.run(
                step.argv,
                check=False,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**_quiet_env(), **step.env},
            )
        except OSError as exc:  # e.g. python3.11, uv or git not installed
            raise BuildError(
                f"step failed: {step.render()}: {exc} (for another interpreter set "
                "REPRO_PYTHON_<MAJOR>_<MINOR>, e.g. REPRO_PYTHON_3_11)"
            ) from exc
    if proc.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-25:])
        raise BuildError(
            f"step failed (exit {proc.returncode}): {step.render()}\nlog {log}:\n{tail}"
        )


def ensure_build(name: str, *, echo: Callable[[str], None] = print) -> BuildEnv:
    """Install the build once (file-locked) and reuse it afterwards."""
    build = get_build(name)
    if build.commit == "latest":
        installer = _Installer(build, _stage_dir(name), echo)
        for step in installer._resolve_latest():
            assert step.action is not None  # resolving `latest` is a harness action
            step.action()
        echo(f"{name} resolved to {installer.full_sha}")
        env = ensure_build(f"{name.partition('@')[0]}@{installer.full_sha}", echo=echo)
        resolved = env.provenance.setdefault("resolved_from", {})
        resolved[name] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        record = build_dir(env.name) / "provenance.json"
        tmp = record.with_suffix(f".tmp-{os.getpid()}")
        tmp.write_text(json.dumps(env.provenance, indent=2) + "\n")
        os.replace(tmp, record)  # the build records that `latest` meant this commit, and when
        return env
    done = _installed(name)
    if done:
        return done
    _check_machine(build)
    with _locked(name, echo):
        done = _installed(name)
        if done:
            return done
        _remove_stale_stages(name)
        stage = _stage_dir(name)
        stage.mkdir(parents=True)
        installer = _Installer(build, stage, echo)
        installer.extra["t0"] = time.monotonic()
        log = stage / "install.log"
        echo(f"installing build {name} into {stage} (log {log})")
        try:
            for step in installer.resolution_steps():
                _run_step(step, log, echo)
            for step in installer.install_steps():  # built after resolution: uses the full SHA
                _run_step(step, log, echo)
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise
    done = _installed(name)
    if not done:
        raise BuildError(f"build {name}: install finished but {build_dir(name)} is incomplete")
    return done


def _remove_stale_stages(name: str) -> None:
    """Leftovers of killed installs (we hold the lock, so nobody is using them)."""
    store = cache_dir() / "builds" / ".store"
    live = build_dir(name).resolve() if build_dir(name).is_symlink() else None
    for path in store.glob(f"{name}-*"):
        if path.resolve() != live and re.fullmatch(
            rf"{re.escape(name)}-\d{{8}}T\d{{6}}Z-\d+", path.name
        ):
            shutil.rmtree(path, ignore_errors=True)


def serve_table(build: Build) -> OptionTable:
    """The option table of the build's release (generated from that release's own parser)."""
    try:
        return option_table(build.serve_options)
    except ConfigError as exc:
        raise ConfigError(f"{BUILDS_FILE}: builds.{build.name}.serve_options: {exc}") from exc


def serve_option_table(build: Build) -> dict[str, dict]:
    """Valid `vllm serve` options for the build's version (generated data + fork-only extras)."""
    table = dict(serve_table(build).options)
    for key, kind in build.extra_serve_options.items():
        table[key] = {"kind": kind}
    return table


def serve_json_schemas(build: Build) -> dict[str, dict]:
    """Config-class key schemas of JSON options; a fork option uses its recorded surface only."""
    schemas = dict(serve_table(build).schemas)
    for key in build.extra_serve_options:
        schemas.pop(key, None)  # the fork's own class, not upstream's
    schemas.update(build.extra_json_schemas)
    return schemas


if __name__ == "__main__":  # pragma: no cover - manual helper
    print("\n".join(install_plan(sys.argv[1])))
