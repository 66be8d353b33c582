"""Shared end-to-end fixtures: the real CPU vLLM build, tiny models, session-wide servers.

e2e tests (marked `e2e`) are never skipped: the `cpu_build` fixture installs the build on first
use (cached in REPRO_CACHE afterwards, file-locked against concurrent installers).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

# No hub access, ever, for anything the test session starts.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

E2E_TIMEOUT_S = 1800  # a cold build (~2-5 min) plus a few server starts on 2 shared cores


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("e2e") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(E2E_TIMEOUT_S))


@pytest.fixture(scope="session")
def cpu_build():
    """The real `cpu-0.32.0` build (installed once, reused across sessions)."""
    from harness.serve.builds import ensure_build

    return ensure_build("cpu-0.32.0", echo=lambda msg: print(f"[cpu_build] {msg}", flush=True))


@pytest.fixture(scope="session")
def tiny_model_path(cpu_build) -> Callable[[str], Path]:
    """tiny_model_path("tiny-llama") -> the cached local model directory (built on first use)."""
    from harness.serve.tiny import ensure_model

    def get(name: str) -> Path:
        return ensure_model(name, cpu_build.python)

    return get


@pytest.fixture(scope="session")
def server_factory(cpu_build, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable]:
    """server_factory("cpu-tiny-mtp", port=None, overrides=()) -> a started VllmServer.

    One server per (profile, overrides) per session, restarted if it died, all stopped at
    session end. Logs go to a session tmp dir; ports are free loopback ports.
    """
    from harness.serve.profiles import load_profile
    from harness.serve.server import VllmServer, free_port

    log_dir = tmp_path_factory.mktemp("vllm-servers")
    servers: dict[tuple[str, tuple[str, ...]], VllmServer] = {}

    def factory(
        profile: str = "cpu-tiny-mtp", port: int | None = None, overrides: Sequence[str] = ()
    ) -> VllmServer:
        key = (profile, tuple(overrides))
        server = servers.get(key)
        if server is not None and server.alive():
            return server
        if server is not None:
            server.stop()
        resolved = load_profile(profile, overrides)
        log = log_dir / f"{resolved.name}-{len(servers)}.log"
        server = VllmServer(resolved, log_path=log, port=port or free_port(), build=cpu_build)
        servers[key] = server
        server.start()
        return server

    yield factory
    for server in servers.values():
        server.stop()
