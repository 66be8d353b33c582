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
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ValidationError, model_validator

from harness.errors import BuildError, ConfigError
from harness.paths import BUILDS_FILE, cache_dir

WHEEL_INDEX = "https://wheels.vllm.ai"
CPU_EXTRA_INDEX_ENV = "REPRO_CPU_EXTRA_INDEX_URL"
FULL_SHA = re.compile(r"^[0-9a-f]{40}$")
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


@dataclass
class Step:
    """One install step: a command (shown and run as is) or a harness action (shown as a comment)."""

    description: str
    argv: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    action: Callable[[], None] | None = None
    shell: str | None = None  # how an action reads as shell, where one line says it exactly

    def render(self) -> str:
        if self.argv is None:
            return self.shell or f"# {self.description}"
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return f"{prefix + ' ' if prefix else ''}{' '.join(_quote(a) for a in self.argv)}"


def _quote(arg: str) -> str:
    """shlex quoting, but ${FULL_SHA} (resolved by an earlier step) stays expandable."""
    return f'"{arg}"' if "${FULL_SHA}" in arg else shlex.quote(arg)


# ---------------------------------------------------------------------------------------------
# Declarations


def load_builds(path: Path = BUILDS_FILE) -> dict[str, Build]:
    try:
        return dict(_load_builds(path, path.stat().st_mtime_ns))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read builds: {exc}") from exc


@functools.lru_cache(maxsize=4)
def _load_builds(path: Path, _mtime_ns: int) -> dict[str, Build]:
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read builds: {exc}") from exc
    if not isinstance(raw, dict) or set(raw) != {"builds"} or not isinstance(raw["builds"], dict):
        raise ConfigError(f"{path}: expected one top-level key `builds:` mapping names to builds")
    builds: dict[str, Build] = {}
    for name, body in raw["builds"].items():
        if not isinstance(body, dict):
            raise ConfigError(f"{path}: builds.{name}: expected a mapping")
        try:
            builds[name] = Build(name=name, **body)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            where = f"builds.{name}.{loc}" if loc else f"builds.{name}"
            raise ConfigError(f"{path}: {where}: {err['msg']}") from exc
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


def build_dir(name: str) -> Path:
    return cache_dir() / "builds" / name


# ---------------------------------------------------------------------------------------------
# Plans


def _find_python(version: str) -> str:
    return (
        os.environ.get(f"REPRO_PYTHON_{version.replace('.', '_')}")
        or shutil.which(f"python{version}")
        or f"python{version}"
    )


def _cpu_extra_index_urls(build: Build) -> list[str]:
    return [*build.extra_index_urls, *os.environ.get(CPU_EXTRA_INDEX_ENV, "").split()]


def _prebuilt_wheel(build: Build) -> str | None:
    env_key = "REPRO_PREBUILT_WHEEL_" + re.sub(r"[^A-Z0-9]", "_", build.name.upper())
    return os.environ.get(env_key) or build.prebuilt_wheel


class _Installer:
    """Builds the step list for one build; the same list is printed (--dry-run) and run."""

    def __init__(self, build: Build, stage: Path, echo: Callable[[str], None] = print):
        self.build = build
        self.stage = stage
        self.venv = stage / "venv"
        self.py = self.venv / "bin" / "python"
        self.echo = echo
        self.full_sha: str | None = build.commit if build.has_full_commit else None
        self.extra: dict[str, Any] = {}  # facts gathered while running, for the provenance

    # -- shared pieces ----------------------------------------------------------------------
    @property
    def sha_ref(self) -> str:
        return self.full_sha or "${FULL_SHA}"

    def _uv_venv(self) -> Step:
        return Step(
            f"create the Python {self.build.python} venv",
            ["uv", "venv", "--seed", "--python", self.build.python, str(self.venv)],
        )

    def _resolve_short_sha(self) -> list[Step]:
        src = self.stage / "src"
        short = self.build.commit or ""
        clone = [
            "git",
            "clone",
            "--filter=blob:none",
            "--no-checkout",
            self.build.repo or "",
            str(src),
        ]
        rev = ["git", "-C", str(src), "rev-parse", "--verify", f"{short}^{{commit}}"]
        return [
            Step(f"clone {self.build.repo} (metadata only) to resolve short SHA {short}", clone),
            Step(
                f"resolve {short} to its 40-character SHA",
                action=lambda: self._run_resolve(rev),
                shell=f"FULL_SHA=$({shlex.join(rev)})",
            ),
        ]

    def _run_resolve(self, rev: list[str]) -> None:
        proc = subprocess.run(rev, check=False, capture_output=True, text=True)
        sha = proc.stdout.strip()
        if proc.returncode != 0 or not FULL_SHA.match(sha):
            raise BuildError(
                f"build {self.build.name}: cannot resolve short SHA {self.build.commit} in "
                f"{self.build.repo} ({proc.stderr.strip() or 'no match'}); put the full "
                f"40-character SHA in {BUILDS_FILE} (builds.{self.build.name}.commit)"
            )
        self.full_sha = sha

    def _resolve_latest(self) -> list[Step]:
        cmd = ["git", "ls-remote", self.build.repo or "", "refs/heads/main"]

        def run() -> None:
            proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
            sha = proc.stdout.split("\t")[0].strip() if proc.returncode == 0 else ""
            if not FULL_SHA.match(sha):
                raise BuildError(
                    f"build {self.build.name}: cannot resolve latest main of "
                    f"{self.build.repo}: {proc.stderr.strip() or 'no output'}"
                )
            self.full_sha = sha

        return [
            Step(
                "resolve nightly@latest to a concrete commit (recorded in the provenance)",
                action=run,
                shell=f"FULL_SHA=$({shlex.join(cmd)} | cut -f1)",
            )
        ]

    def _verify(self) -> list[Step]:
        vllm = str(self.venv / "bin" / "vllm")
        return [
            Step("check the vllm executable", [vllm, "--version"]),
            Step("check imports", [str(self.py), "-c", "import torch, vllm, transformers"]),
        ]

    def _finish(self) -> list[Step]:
        return [
            Step(
                f"write provenance (pip freeze, versions, wheel, time) to "
                f"{self.stage / 'provenance.json'}",
                action=self.write_provenance,
            ),
            Step(
                f"publish: point {build_dir(self.build.name)} at {self.stage} (atomic rename)",
                action=self.publish,
            ),
        ]

    # -- per kind --------------------------------------------------------------------------
    def steps(self) -> list[Step]:
        """All steps; what follows a SHA resolution shows ${FULL_SHA} until it has run."""
        return self.resolution_steps() + self.install_steps()

    def resolution_steps(self) -> list[Step]:
        b = self.build
        if b.kind in ("commit-wheel", "nightly") and b.commit == "latest":
            return self._resolve_latest()
        if b.kind in ("commit-wheel", "source") and not b.has_full_commit:
            return self._resolve_short_sha()
        return []

    def install_steps(self) -> list[Step]:
        b = self.build
        if b.kind == "pypi-cpu":
            return self._steps_pypi_cpu()
        steps: list[Step] = [self._uv_venv()]
        pip = ["uv", "pip", "install", "--python", str(self.py)]
        if b.kind == "pypi":
            steps.append(
                Step(f"install {b.package}", [*pip, b.package or "", "--torch-backend=auto"])
            )
        elif b.kind in ("commit-wheel", "nightly"):
            steps.append(
                Step(
                    f"install vllm from the per-commit wheel index at {self.sha_ref}",
                    [
                        *pip,
                        "vllm",
                        "--torch-backend=auto",
                        "--extra-index-url",
                        f"{WHEEL_INDEX}/{self.sha_ref}",
                    ],
                )
            )
        elif b.kind == "source":
            src = str(self.stage / "src")
            if b.has_full_commit:
                steps.append(
                    Step(
                        f"clone {b.repo} (branch {b.branch})",
                        [
                            "git",
                            "clone",
                            *(["--branch", b.branch] if b.branch else []),
                            b.repo or "",
                            src,
                        ],
                    )
                )
            steps.append(
                Step(
                    f"check out {self.sha_ref}",
                    ["git", "-C", src, "checkout", "--detach", self.sha_ref],
                )
            )
            wheel = _prebuilt_wheel(b)
            if wheel:
                env = {"VLLM_USE_PRECOMPILED": "1", "VLLM_PRECOMPILED_WHEEL_LOCATION": wheel}
                desc = "editable install reusing the prebuilt wheel of this commit"
            else:
                env = dict(b.build_env)
                desc = "full source build with the CUDA toolchain (new HiSparse kernels)"
            steps.append(Step(desc, [*pip, "-e", src, "--torch-backend=auto"], env=env))
        return steps + self._verify() + self._finish()

    def _steps_pypi_cpu(self) -> list[Step]:
        b = self.build
        index_args = [a for url in _cpu_extra_index_urls(b) for a in ("--extra-index-url", url)]
        return [
            Step(
                f"create the Python {b.python} venv",
                [_find_python(b.python), "-m", "venv", str(self.venv)],
            ),
            Step("upgrade pip", [str(self.py), "-m", "pip", "install", "-U", "pip"]),
            Step(
                f"install {b.package} (torch 2.13.0+cpu from pip's configured find-links or the "
                "extra index URLs)",
                [
                    str(self.py),
                    "-m",
                    "pip",
                    "install",
                    "--report",
                    str(self.stage / "pip-report.json"),
                    *index_args,
                    b.package or "",
                ],
            ),
            Step(
                f"remove {', '.join(b.remove)} (built against CUDA torch; break imports)",
                [str(self.py), "-m", "pip", "uninstall", "-y", *b.remove],
            ),
            Step(
                f"write the metadata-only shim {self._shim_name()} in site-packages so "
                "importlib.metadata.version('vllm') resolves (Name: vllm, Version: "
                f"{self._cpu_version()}+cpu, INSTALLER, empty RECORD)",
                action=self.write_shim,
            ),
            *self._verify(),
            *self._finish(),
        ]

    # -- CPU shim ----------------------------------------------------------------------------
    def _cpu_version(self) -> str:
        return (self.build.package or "").split("==")[-1]

    def _shim_name(self) -> str:
        return f"vllm-{self._cpu_version()}+cpu.dist-info"

    def _site_packages(self) -> Path:
        found = sorted((self.venv / "lib").glob("python*/site-packages"))
        if not found:
            raise BuildError(f"build {self.build.name}: no site-packages under {self.venv}")
        return found[0]

    def write_shim(self) -> None:
        site = self._site_packages()
        dist_name = (self.build.package or "").split("==")[0].replace("-", "_")
        source = site / f"{dist_name}-{self._cpu_version()}.dist-info" / "METADATA"
        if not source.exists():
            raise BuildError(f"build {self.build.name}: {source} missing after install")
        lines = []
        for line in source.read_text().splitlines():
            if line.startswith("Name:"):
                line = "Name: vllm"
            elif line.startswith("Version:"):
                line = f"Version: {self._cpu_version()}+cpu"
            lines.append(line)
        shim = site / self._shim_name()
        shim.mkdir(exist_ok=True)
        (shim / "METADATA").write_text("\n".join(lines) + "\n")
        (shim / "INSTALLER").write_text("pip\n")
        (shim / "RECORD").write_text("")

    # -- provenance and publishing -----------------------------------------------------------
    def write_provenance(self) -> None:
        b = self.build
        freeze = _output([str(self.py), "-m", "pip", "freeze", "--all"]).splitlines()
        version = _output([str(self.venv / "bin" / "vllm"), "--version"])
        code = (
            "import importlib.metadata as m, json; print(json.dumps("
            "{d: m.version(d) for d in ('torch', 'transformers', 'vllm')}))"
        )
        dists = json.loads(_output([str(self.py), "-c", code]) or "{}")
        record: dict[str, Any] = {
            "build": b.name,
            "kind": b.kind,
            "device": b.device,
            "description": b.description,
            "package": b.package,
            "repo": b.repo,
            "branch": b.branch,
            "requested_commit": b.commit,
            "commit": self.full_sha,
            "vllm_version_output": version.splitlines()[-1] if version else None,
            "versions": dists,
            "python": _output([str(self.py), "-V"]),
            "wheel": self._wheel_from_report(),
            "pip_freeze": freeze,
            "installed_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "install_seconds": round(time.monotonic() - self.extra.get("t0", time.monotonic()), 1),
            "install_dir": str(self.stage),
        }
        (self.stage / "provenance.json").write_text(json.dumps(record, indent=2) + "\n")

    def _wheel_from_report(self) -> dict | None:
        report = self.stage / "pip-report.json"
        if not report.exists():
            return None
        wanted = (self.build.package or "").split("==")[0].lower()
        for item in json.loads(report.read_text()).get("install", []):
            meta = item.get("metadata", {})
            if meta.get("name", "").lower() == wanted:
                info = item.get("download_info", {})
                return {
                    "name": meta.get("name"),
                    "version": meta.get("version"),
                    "url": info.get("url"),
                    "hashes": info.get("archive_info", {}).get("hashes"),
                }
        return None

    def publish(self) -> None:
        link = build_dir(self.build.name)
        tmp = link.with_name(f".{link.name}.link-{os.getpid()}")
        tmp.unlink(missing_ok=True)
        os.symlink(os.path.relpath(self.stage, link.parent), tmp)
        os.replace(tmp, link)


def _output(argv: list[str]) -> str:
    proc = subprocess.run(argv, check=False, capture_output=True, text=True, env=_quiet_env())
    return proc.stdout.strip()


def _quiet_env() -> dict[str, str]:
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }


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
        and not (os.environ.get("CUDA_HOME") or shutil.which("nvcc"))
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
            step.action()  # type: ignore[misc]
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


@functools.lru_cache(maxsize=8)
def _option_table(version: str) -> dict[str, dict]:
    from importlib import resources

    ref = resources.files("harness") / "data" / "vllm_serve_options" / f"{version}.yaml"
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return dict(yaml.load(ref.read_text(), Loader=loader)["options"])


def serve_option_table(build: Build) -> dict[str, dict]:
    """Valid `vllm serve` options for the build's version (generated data + fork-only extras)."""
    try:
        table = dict(_option_table(build.serve_options))
    except OSError as exc:
        raise ConfigError(
            f"{BUILDS_FILE}: builds.{build.name}.serve_options: no option table "
            f"{build.serve_options!r} ({exc})"
        ) from exc
    for key, kind in build.extra_serve_options.items():
        table[key] = {"kind": kind}
    return table


if __name__ == "__main__":  # pragma: no cover - manual helper
    print("\n".join(install_plan(sys.argv[1])))
