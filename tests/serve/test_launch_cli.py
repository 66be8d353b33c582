"""`repro launch` / `repro build` / `repro builds list` as processes, against a cache whose
cpu-0.32.0 build is the fault-injecting stand-in (fast; the real server is in test_launch_e2e)."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from harness.serve.server import free_port, group_and_descendants

FAKE = Path(__file__).resolve().parents[1] / "fake_vllm.py"
REPRO = [sys.executable, "-c", "from harness.cli import main; main()"]


@pytest.fixture
def fake_cache(tmp_path: Path) -> dict[str, str]:
    """A REPRO_CACHE in which `cpu-0.32.0` is 'installed' with the stand-in vllm."""
    root = tmp_path / "cache" / "builds" / "cpu-0.32.0"
    (root / "venv" / "bin").mkdir(parents=True)
    (root / "venv" / "bin" / "python").symlink_to(sys.executable)
    exe = root / "venv" / "bin" / "vllm"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} "$@"\n')
    exe.chmod(0o755)
    (root / "provenance.json").write_text(
        json.dumps({"build": "cpu-0.32.0", "fake": True, "vllm_version_output": "fake"})
    )
    return {**os.environ, "REPRO_CACHE": str(tmp_path / "cache"), "REPRO_STOP_TIMEOUTS": "1,1,5"}


def launch(env: dict[str, str], log_dir: Path, port: int, mode: str = "ok") -> subprocess.Popen:
    return subprocess.Popen(
        [
            *REPRO,
            "launch",
            "--profile",
            "cpu-tiny",
            "--port",
            str(port),
            "--log-dir",
            str(log_dir),
            "--set",
            "model=/fake/model",
            "--set",
            f"env.FAKE_VLLM_MODE={mode}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def read_ready(proc: subprocess.Popen, timeout: float = 60) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "no output on stdout"
    return proc.stdout.readline().strip()


def live(pids: set[int]) -> set[int]:
    out = set()
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                out.add(pid)
        except OSError:
            pass
    return out


@pytest.mark.parametrize(("sig", "mode"), [(signal.SIGINT, "ok"), (signal.SIGTERM, "stubborn")])
def test_launch_ready_line_then_signal_tears_down(
    fake_cache: dict[str, str], tmp_path: Path, sig: signal.Signals, mode: str
) -> None:
    port = free_port()
    proc = launch(fake_cache, tmp_path / "logs", port, mode)
    try:
        assert read_ready(proc) == f"ready http://127.0.0.1:{port}"
        record = json.loads((tmp_path / "logs" / "launch.json").read_text())
        assert record["build"]["fake"] and record["command"][2] == "/fake/model"
        assert record["kv_capacity"]["kv_cache_tokens"] == 1536
        group = group_and_descendants(record["pid"], record["pid"])
        assert group
        proc.send_signal(sig)
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
        assert live(group) == set()
        assert "stopped_at" in json.loads((tmp_path / "logs" / "launch.json").read_text())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_launch_reports_server_death(fake_cache: dict[str, str], tmp_path: Path) -> None:
    port = free_port()
    proc = launch(fake_cache, tmp_path / "logs", port)
    try:
        assert read_ready(proc).startswith("ready ")
        pid = json.loads((tmp_path / "logs" / "launch.json").read_text())["pid"]
        os.kill(pid, signal.SIGKILL)
        assert proc.wait(timeout=60) == 2
        stderr = proc.stderr.read()
        assert "error: vLLM (cpu-tiny) exited with code -9 while serving" in stderr
        assert "fake vllm ok" in stderr  # the log tail
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_launch_refuses_busy_port(fake_cache: dict[str, str], tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        proc = launch(fake_cache, tmp_path / "logs", port)
        assert proc.wait(timeout=60) == 2
        assert proc.stdout.read() == ""
        assert f"port {port} on 127.0.0.1 is busy" in proc.stderr.read()
    assert not (tmp_path / "logs" / "server.log").exists()


def test_launch_gpu_profile_names_url(fake_cache: dict[str, str], tmp_path: Path) -> None:
    proc = subprocess.run(
        [*REPRO, "launch", "--profile", "hisparse384", "--port", str(free_port())],
        capture_output=True,
        text=True,
        env=fake_cache,
        timeout=60,
        check=False,
    )
    if "has 0" not in proc.stderr:
        pytest.fail(f"expected the no-GPU refusal, got: {proc.stderr}")
    assert proc.returncode == 2 and "--url" in proc.stderr


def test_build_and_builds_list_reuse_installed(fake_cache: dict[str, str]) -> None:
    proc = subprocess.run(
        [*REPRO, "build", "cpu-0.32.0"],
        capture_output=True,
        text=True,
        env=fake_cache,
        timeout=60,
        check=True,
    )
    assert proc.stdout.startswith("ready cpu-0.32.0:")
    listing = subprocess.run(
        [*REPRO, "builds", "list"],
        capture_output=True,
        text=True,
        env=fake_cache,
        timeout=60,
        check=True,
    ).stdout
    line = next(row for row in listing.splitlines() if row.startswith("cpu-0.32.0"))
    assert "installed" in line
    other = next(row for row in listing.splitlines() if row.startswith("vllm-0.32.0"))
    assert "installed" not in other
