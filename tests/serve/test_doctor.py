"""`repro doctor`: checks from injected machine facts, and the CLI on this very machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from harness.serve import doctor, hubcheck
from harness.serve.checks import PreflightError, raise_on_failures
from harness.serve.doctor import Gpu, host_pools, memory_checks, shm_checks
from harness.serve.profiles import load_profile
from harness.serve.server import free_port

H200 = Gpu(0, "NVIDIA H200", 9.0, "580.65", 143771.0, 143000.0, "Enabled")


def status(checks, name: str) -> str:
    return next(c.status for c in checks if c.name == name)


def test_pinned_pools_per_profile() -> None:
    fork = host_pools(load_profile("hisparse384"))
    assert (fork.hisparse_gib, fork.offload_gib) == (384, 128)
    upstream = host_pools(load_profile("upstream-hisparse384"))
    assert (upstream.hisparse_gib, upstream.offload_gib, upstream.total_gib) == (384, 128, 512)
    assert host_pools(load_profile("offload512")).total_gib == 512
    dp2 = host_pools(load_profile("upstream-hisparse384", ["serve.data-parallel-size=2"]))
    assert dp2.hisparse_gib == 768 and dp2.total_gib == 896  # host_pool_gib is per DP replica
    assert host_pools(load_profile("cpu-tiny-mtp")).total_gib == 0


def test_hisparse_pool_against_95_percent_of_available_ram() -> None:
    profile = load_profile("upstream-hisparse384")
    tight = memory_checks(profile, 400.0)  # 384 > 0.95 * 400 = 380: vLLM would refuse
    assert status(tight, "hisparse-pool") == "fail" and status(tight, "host-ram") == "fail"
    roomy = memory_checks(profile, 600.0)
    assert status(roomy, "hisparse-pool") == "ok" and status(roomy, "host-ram") == "ok"
    between = memory_checks(profile, 420.0)  # the HiSparse pool fits, both pools do not
    assert status(between, "hisparse-pool") == "ok" and status(between, "host-ram") == "fail"
    line = next(c for c in tight if c.name == "hisparse-pool").line()
    assert "384 GiB" in line and "95 %" in line and "host_pool_gib" in line


def test_nvidia_smi_output_is_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    out = "0, NVIDIA H200, 9.0, 580.65, 143771, 143000, Enabled, 1980, 1980\nnot a gpu line\n"

    def run(argv, **kw):
        assert "--format=csv,noheader,nounits" in argv
        return subprocess.CompletedProcess(argv, 0, stdout=out, stderr="")

    monkeypatch.setattr(doctor.shutil, "which", lambda name: f"/usr/bin/{name}")
    (gpu,) = doctor.query_gpus(run)
    assert gpu == Gpu(
        0, "NVIDIA H200", 9.0, "580.65", 143771.0, 143000.0, "Enabled", 1980.0, 1980.0
    )


def test_gpu_checks() -> None:
    profile = load_profile("hisparse384")
    good = doctor.gpu_checks(profile, [Gpu(
        i, H200.name, 9.0, H200.driver, H200.memory_total_mib, H200.memory_free_mib, "Enabled"
    ) for i in range(8)])  # fmt: skip
    assert all(c.status == "ok" for c in good), [c.line() for c in good]
    a100 = [Gpu(i, "NVIDIA A100", 8.0, "580", 81920.0, 81000.0, "Disabled") for i in range(8)]
    checks = doctor.gpu_checks(profile, a100)
    assert status(checks, "compute-capability") == "fail"
    assert status(checks, "persistence-mode") == "warn"
    locked = [Gpu(i, H200.name, 9.0, "580", 143771.0, 143000.0, "Enabled", 1200.0, 1980.0)
              for i in range(8)]  # fmt: skip
    assert status(doctor.gpu_checks(profile, locked), "clocks") == "warn"
    busy = [Gpu(i, H200.name, 9.0, "580", 143771.0, 20000.0, "Enabled") for i in range(8)]
    assert status(doctor.gpu_checks(profile, busy), "gpu-memory") == "fail"
    assert status(doctor.gpu_checks(profile, busy[:4]), "gpus") == "fail"
    assert status(doctor.gpu_checks(profile, []), "gpus") == "fail"
    assert status(doctor.gpu_checks(load_profile("cpu-tiny"), []), "gpus") == "ok"


def test_shm_size_and_stale_offload_files(tmp_path: Path) -> None:
    stale = tmp_path / "vllm_offload_abc.mmap"
    stale.write_bytes(b"x" * 4096)
    checks = shm_checks(load_profile("offload512"), shm=tmp_path)
    assert status(checks, "stale-offload-mmap") == "warn"
    assert str(stale) in next(c for c in checks if c.name == "stale-offload-mmap").remedy
    # 512 GiB offloading pool vs the free space of the tmp filesystem
    assert status(checks, "dev-shm") == "fail"
    with open(stale, "rb"):  # open by a process: not stale
        assert "stale-offload-mmap" not in {
            c.name for c in shm_checks(load_profile("cpu-tiny"), shm=tmp_path)
        }


class FakeResponse:
    def __init__(self, code: int):
        self.status_code = code


def test_hub_checks_online_with_fake_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    profile = load_profile("hisparse384")
    seen: list[str] = []

    def get(url: str, **kw):
        seen.append(url)
        assert kw["timeout"] <= 5 and kw["headers"]["Authorization"] == "Bearer hf_test"
        if "GLM-5.3" in url:
            return FakeResponse(401)
        if "OpenScience" in url:
            raise requests.ConnectTimeout("slow")
        return FakeResponse(404)

    checks = hubcheck.hub_checks(profile, get=get)
    by = {c.name: c for c in checks}
    assert by["hub-model"].status == "fail" and "HF_TOKEN" in by["hub-model"].remedy
    assert by["hub-trajectories"].status == "fail"
    assert "openhands-glm53.yaml: trajectories_revision" in by["hub-trajectories"].remedy
    assert by["hub-pad_text"].status == "warn"
    assert any("/api/datasets/nebius/SWE-rebench-openhands-trajectories/revision/3545" in u
               for u in seen)  # fmt: skip


def test_hub_checks_offline_look_in_the_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    profile = load_profile("hisparse384")
    rev = "35455389ab51bf5e2306bfd436ef72d0f98bf882"
    snap = tmp_path / "datasets--nebius--SWE-rebench-openhands-trajectories" / "snapshots" / rev
    snap.mkdir(parents=True)
    by = {c.name: c for c in hubcheck.hub_checks(profile, get=None)}
    assert by["hub-trajectories"].status == "ok"
    assert by["hub-pad_text"].status == "warn" and by["hub-model"].status == "warn"


def test_raise_on_failures_one_line_per_failure() -> None:
    checks = memory_checks(load_profile("upstream-hisparse384"), 100.0)
    with pytest.raises(PreflightError) as info:
        raise_on_failures(checks)
    lines = str(info.value).splitlines()
    assert lines[0] == "preflight: 2 check(s) failed"
    assert len(lines) == 3 and all(" -- " in line for line in lines[1:])
    raise_on_failures(memory_checks(load_profile("upstream-hisparse384"), 1000.0))


def _doctor(profile: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from harness.cli import main; main()",
            "doctor",
            "--profile",
            profile,
            "--port",
            str(free_port()),
        ],
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd(), "HF_HUB_OFFLINE": "1"},
        timeout=120,
    )


def test_doctor_on_this_machine(cpu_build) -> None:
    gpus = doctor.query_gpus()
    ram = doctor.mem_available_gib()
    glm = _doctor("hisparse384")
    assert glm.returncode == 1, glm.stdout + glm.stderr
    fails = [line for line in glm.stdout.splitlines() if line.startswith("FAIL")]
    assert fails and all(" -- " in line for line in fails)  # each with its remedy
    assert any(line.startswith("FAIL gpus:") for line in fails) == (len(gpus) < 8)
    assert any(line.startswith("FAIL host-ram:") for line in fails) == (ram < 512)
    tiny = _doctor("cpu-tiny-mtp")
    assert tiny.returncode == 0, tiny.stdout + tiny.stderr
    assert tiny.stdout.strip().endswith("all checks pass")


def test_doctor_json(cpu_build) -> None:
    import json

    proc = subprocess.run(
        [sys.executable, "-c", "from harness.cli import main; main()", "doctor", "--profile",
         "hisparse384", "--json", "--port", str(free_port())],
        check=False, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": os.getcwd(), "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    data = json.loads(proc.stdout)
    assert proc.returncode == (0 if data["ok"] else 1)
    names = {c["name"] for c in data["checks"]}
    assert {"gpus", "host-ram", "hisparse-pool", "dev-shm", "build", "port"} <= names
    assert all(c["remedy"] for c in data["checks"] if c["status"] == "fail")


def test_require_ready_raises_for_the_glm_arm_here_and_passes_for_cpu_tiny() -> None:
    gpus, ram = doctor.query_gpus(), doctor.mem_available_gib()
    if len(gpus) < 8 or ram < 512:  # this machine: no GPU, far less than 512 GiB
        with pytest.raises(PreflightError, match="preflight for profile hisparse384") as info:
            doctor.require_ready(load_profile("hisparse384"), port=free_port())
        assert all(" -- " in line for line in str(info.value).splitlines()[1:])
    warnings = doctor.require_ready(load_profile("cpu-tiny"), port=free_port())
    assert all(c.status != "fail" for c in warnings)
    attached = doctor.require_ready(load_profile("hisparse384"), url="http://gpu-node:8000")
    assert {c.name for c in attached} >= {"port"} and "gpus" not in {c.name for c in attached}
