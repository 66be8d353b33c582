"""Shared end-to-end fixtures (the real CPU vLLM build, tiny models, session-wide servers) and
the suite's plumbing: tiers (tests/support/tiers.py), the server census, per-module time budgets.

e2e tests are never skipped: the `cpu_build` fixture installs the build on first use (cached in
REPRO_CACHE afterwards, file-locked against concurrent installers). With REPRO_TESTS_REQUIRE_ALL=1
(as `.ci/run` sets it) any skip is a failure, so a tier cannot pass by not running.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from support import budgets, schedule, tiers
from support.census import ServerCensus

# No hub access, ever, for anything the test session starts.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

E2E_TIMEOUT_S = 1800  # a cold build (~2-5 min) plus a few server starts on 2 shared cores


pytest_plugins = ["pytester"]  # tests/test_tiers.py runs inner sessions with the tier plugin

_SESSION: list[pytest.Session] = []
_CENSUS = ServerCensus()


def pytest_configure(config: pytest.Config) -> None:
    tiers.register(config)
    schedule.configure(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    schedule.unconfigure(config)


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`-n`: the tier-aware scheduler (tests/support/schedule.py)."""
    return schedule.make_scheduler(
        config, log, lambda: _SESSION[0].stash.get(tiers.UNIT_FAILED, []) if _SESSION else []
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    _SESSION.append(session)
    if not hasattr(session.config, "workerinput"):  # one census per run: the xdist controller's
        _CENSUS.start()


@pytest.hookimpl(tryfirst=True)  # tiers on the items before any other plugin reads markers
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    tiers.apply(session, items)
    schedule.write_scopes(config, items)
    for item in items:
        if item.get_closest_marker("unit") is None and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(E2E_TIMEOUT_S))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if (
        report.skipped
        and os.environ.get("REPRO_TESTS_REQUIRE_ALL") == "1"
        and not hasattr(report, "wasxfail")
    ):
        report.outcome = "failed"
        report.longrepr = f"skipped where REPRO_TESTS_REQUIRE_ALL=1: {report.longrepr}"
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    budgets.record(report)
    if _SESSION:
        tiers.record(_SESSION[0], report)


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    tiers.stop_after_unit_tier(item, nextitem)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    starts = _CENSUS.stop()
    write = terminalreporter.write_line
    terminalreporter.section("server starts")
    write(
        f"server starts during the session: vllm {starts['vllm']}, sim {starts['sim']} "
        "(every such process on this machine, subprocesses and Slurm jobs included)"
    )
    for line in budgets.report():
        write(line)


@pytest.fixture(scope="session")
def slurm() -> None:
    """The local single-node cluster (scripts/slurm-local.sh), started if installed but down."""
    import subprocess

    from harness.cluster.slurm import INSTALL_HINT, have_slurm

    if not have_slurm():
        tiers.require("Slurm", f"install it with: {INSTALL_HINT}")
    script = Path(__file__).resolve().parents[1] / "scripts" / "slurm-local.sh"
    subprocess.run([str(script), "start"], check=True, timeout=120)


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


@pytest.fixture(scope="session")
def traced_pressure_server(server_factory, tmp_path_factory: pytest.TempPathFactory):
    """(the shared cpu-tiny-pressure server, its scheduler trace): vLLM's own scheduler with
    each decision recorded (harness/serve/sched_trace.py), for `harness.sim.trace_check`. One
    server for every test that needs the 16-block pool; the trace covers its whole lifetime."""
    from harness.serve.sched_trace import trace_overrides

    trace = tmp_path_factory.getbasetemp() / "pressure-sched-trace.jsonl"
    return server_factory("cpu-tiny-pressure", overrides=trace_overrides(trace)), trace


@pytest.fixture(scope="module")
def sim_http_server() -> Iterator[tuple[str, object]]:
    """The simulated engine behind HTTP, in this process, on a free loopback port (one per module)."""
    import asyncio
    import threading

    from aiohttp import web

    from harness.sim.serve.app import make_app
    from harness.sim.serve.server import ServeOptions, build_state

    state = build_state(ServeOptions(profile="hisparse384", tokenizer="tiny:tokenizer"))
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(make_app(state))
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}", state
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    loop.run_until_complete(runner.cleanup())
    loop.close()
