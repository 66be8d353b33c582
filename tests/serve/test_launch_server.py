"""Server lifecycle without vLLM: refusals before anything starts, readiness, early exit,
timeouts and the SIGINT -> SIGTERM -> SIGKILL escalation over the whole process group, using a
stand-in executable for the faults a real server cannot produce on demand. Also provenance."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import requests

from harness.errors import ServerError
from harness.serve import server as server_mod
from harness.serve.attached import AttachedServer
from harness.serve.builds import BuildEnv
from harness.serve.profiles import load_profile
from harness.serve.provenance import (
    cache_config_labels,
    host_facts,
    kv_capacity_lines,
    relevant_env,
)
from harness.serve.server import VllmServer, free_port, group_and_descendants

FAKE = Path(__file__).resolve().parents[1] / "fake_vllm.py"


@pytest.fixture
def fake_build(tmp_path: Path) -> BuildEnv:
    exe = tmp_path / "vllm"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} "$@"\n')
    exe.chmod(0o755)
    return BuildEnv(
        name="fake",
        venv=tmp_path,
        python=Path(sys.executable),
        vllm=exe,
        provenance={"build": "fake"},
    )


def fake_server(
    tmp_path: Path,
    build: BuildEnv,
    mode: str,
    timeout: float = 30,
    stop_timeouts: tuple[float, float, float] = (5, 5, 5),
) -> VllmServer:
    profile = load_profile(
        "cpu-tiny",
        [f"model={tmp_path}/model", f"ready_timeout_s={timeout}", f"env.FAKE_VLLM_MODE={mode}"],
    )
    return VllmServer(
        profile,
        log_path=tmp_path / "server.log",
        port=free_port(),
        build=build,
        stop_timeouts=stop_timeouts,
    )


def pids_alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.add(pid)
    return alive


def test_busy_port_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_build(*_a: object, **_k: object) -> None:
        raise AssertionError("must not touch the build when the port is busy")

    monkeypatch.setattr(server_mod, "ensure_build", no_build)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        server = VllmServer(load_profile("cpu-tiny"), log_path=tmp_path / "s.log", port=port)
        with pytest.raises(ServerError, match=f"port {port} on 127.0.0.1 is busy"):
            server.start()
    assert server.pid is None and not (tmp_path / "s.log").exists()


def test_gpu_profile_without_gpus_names_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_mod, "nvidia_gpu_count", lambda: 0)
    monkeypatch.setattr(server_mod, "ensure_build", lambda *a, **k: pytest.fail("no build"))
    server = VllmServer(load_profile("hisparse384"), log_path=tmp_path / "s.log", port=free_port())
    with pytest.raises(ServerError) as info:
        server.start()
    message = str(info.value)
    assert "needs 8 NVIDIA GPU" in message and "has 0" in message and "--url" in message


def test_ready_then_graceful_stop(tmp_path: Path, fake_build: BuildEnv) -> None:
    server = fake_server(tmp_path, fake_build, "ok")
    with server:
        assert server.alive()
        assert requests.get(f"{server.base_url}/health", timeout=5).status_code == 200
        assert server.command[:3] == [str(fake_build.vllm), "serve", f"{tmp_path}/model"]
        assert server.env["VLLM_HOST_IP"] == "127.0.0.1"
        assert server.env["HF_HUB_OFFLINE"] == "1" and server.env["VLLM_TARGET_DEVICE"] == "cpu"
        assert "127.0.0.1" in server.env["NO_PROXY"]
        tmpdir = Path(server.env["TMPDIR"])
        assert tmpdir.is_dir()
        record = server.provenance()
        pid = server.pid
    assert not server.alive() and not tmpdir.exists()
    assert pids_alive({pid}) == set()
    assert "SIGINT, shutting down" in server.log_tail()  # stopped by the first, gentlest signal
    assert record["kv_capacity"]["kv_cache_tokens"] == 1536
    assert record["kv_capacity"]["max_concurrency"] == 1.5
    assert record["cache_config_info"] == [
        {"block_size": "128", "engine": "0", "num_gpu_blocks": "12"}
    ]
    assert record["version"] == {"version": "0.0.0-fake"}
    assert record["build"] == {"build": "fake"} and record["env"]["VLLM_HOST_IP"] == "127.0.0.1"
    assert record["command_line"].startswith(str(fake_build.vllm))
    server.stop()  # idempotent


def test_stubborn_group_is_killed(tmp_path: Path, fake_build: BuildEnv) -> None:
    server = fake_server(tmp_path, fake_build, "stubborn", stop_timeouts=(0.5, 0.5, 5))
    server.start()
    group = group_and_descendants(server.pid, server.pid)
    assert len(group) >= 2  # the (exec'd) fake server and its grandchild
    server.stop()
    # the stubborn fake ignores SIGINT and SIGTERM: a dead group shows the escalation to SIGKILL
    # (how long it took is the machine's business; pytest-timeout bounds a hang)
    assert pids_alive(group) == set()


def test_early_exit_reports_log_tail(tmp_path: Path, fake_build: BuildEnv) -> None:
    server = fake_server(tmp_path, fake_build, "crash")
    with pytest.raises(ServerError) as info:
        server.start()
    assert "exited with code 3 during start-up" in str(info.value)
    assert "engine core failed to start (fake)" in str(info.value)
    assert not server.alive()


def test_readiness_timeout_stops_server(tmp_path: Path, fake_build: BuildEnv) -> None:
    server = fake_server(tmp_path, fake_build, "hang", timeout=2)
    with pytest.raises(ServerError, match="not ready after 2 s"):
        server.start()
    assert not server.alive()


def test_harness_crash_leaves_no_orphans(tmp_path: Path, fake_build: BuildEnv) -> None:
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        from pathlib import Path
        from harness.serve.builds import BuildEnv
        from harness.serve.profiles import load_profile
        from harness.serve.server import VllmServer, free_port
        build = BuildEnv("fake", Path({str(tmp_path)!r}), Path(sys.executable),
                         Path({str(fake_build.vllm)!r}), {{}})
        profile = load_profile("cpu-tiny", ["model=/m", "env.FAKE_VLLM_MODE=stubborn"])
        server = VllmServer(profile, log_path=Path({str(tmp_path)!r}) / "c.log",
                            port=free_port(), build=build, stop_timeouts=(0.5, 0.5, 5))
        server.start()
        print(server.pid, flush=True)
        raise RuntimeError("harness bug")
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode != 0 and "harness bug" in proc.stderr
    pgid = int(proc.stdout.split()[0])
    assert group_and_descendants(pgid, pgid) == set()


def test_attached_server_normalises_url(tmp_path: Path, fake_build: BuildEnv) -> None:
    with fake_server(tmp_path, fake_build, "ok") as server:
        for url in (
            server.base_url,
            server.base_url + "/",
            server.base_url + "/v1",
            server.base_url + "/v1/",
        ):
            attached = AttachedServer(url)
            assert attached.base_url == server.base_url
        assert attached.alive() and attached.served_model_name == "tiny"
        record = attached.provenance()
        assert record["models"]["data"][0]["id"] == "tiny"
        assert record["cache_config_info"][0]["num_gpu_blocks"] == "12"
    assert not AttachedServer(server.base_url).alive()
    with pytest.raises(ServerError, match="expected http"):
        AttachedServer("gpu-node:8000")


def test_kv_capacity_lines_gpu_and_hisparse() -> None:
    log = textwrap.dedent("""\
        INFO 09-05 10:00:01 [kv_cache_utils.py:2328] GPU KV cache size: 400,640 tokens, \
Maximum concurrency for 142,000 tokens per request: 2.82x
        INFO 09-05 10:00:01 [x.py:1] HiSparse HMA: 384.00 GiB host source (143395 blocks), \
17.80 GiB shared GPU indexer/resident/hot pool (103692 blocks)
        INFO 09-05 10:00:01 [x.py:2] HiSparse steady-state maximum concurrency: 23.00x
        INFO 09-05 10:00:02 [api_server.py:1] Starting vLLM API server
    """)
    parsed = kv_capacity_lines(log)
    assert parsed["kv_cache_tokens"] == 400640 and parsed["max_concurrency"] == 2.82
    assert len(parsed["lines"]) == 3 and "Starting" not in " ".join(parsed["lines"])


def test_cache_config_labels_and_env_and_host() -> None:
    text = (
        '# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size="16",'
        'cache_dtype="auto",engine="0",num_gpu_blocks="8192"} 1.0\n'
        '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0"} 2.0\n'
    )
    assert cache_config_labels(text) == [
        {"block_size": "16", "cache_dtype": "auto", "engine": "0", "num_gpu_blocks": "8192"}
    ]
    env = relevant_env(
        {"VLLM_HOST_IP": "127.0.0.1", "HF_TOKEN": "x", "HOME": "/root", "TMPDIR": "/t"}
    )
    assert env == {"TMPDIR": "/t", "VLLM_HOST_IP": "127.0.0.1"}
    facts = host_facts()
    assert facts["cpu_count"] == os.cpu_count() and facts["ram_gib"] > 0
    assert facts["cpu_model"]
    json.dumps(facts)
