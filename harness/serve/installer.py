"""Install steps per build kind: the same step list is printed (`--dry-run`) and run.

Split from builds.py (declarations, locking, publishing); `_Installer` builds the steps.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import env as harness_env
from harness.errors import BuildError
from harness.paths import BUILDS_FILE, cache_dir

if TYPE_CHECKING:
    from harness.serve.builds import Build

WHEEL_INDEX = "https://wheels.vllm.ai"
CPU_EXTRA_INDEX_ENV = "REPRO_CPU_EXTRA_INDEX_URL"
FULL_SHA = re.compile(r"^[0-9a-f]{40}$")


def build_dir(name: str) -> Path:
    return cache_dir() / "builds" / name


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


def _find_python(version: str) -> str:
    return (
        harness_env.text(f"REPRO_PYTHON_{version.replace('.', '_')}")
        or shutil.which(f"python{version}")
        or f"python{version}"
    )


def _cpu_extra_index_urls(build: Build) -> list[str]:
    return [*build.extra_index_urls, *(harness_env.text(CPU_EXTRA_INDEX_ENV) or "").split()]


def _prebuilt_wheel(build: Build) -> str | None:
    env_key = "REPRO_PREBUILT_WHEEL_" + re.sub(r"[^A-Z0-9]", "_", build.name.upper())
    return harness_env.text(env_key) or build.prebuilt_wheel


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
    return harness_env.for_child(
        {
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        }
    )
