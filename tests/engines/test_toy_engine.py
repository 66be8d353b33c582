"""A third engine added in one file: a toy engine, registered here, that serves the loopback
fake OpenAI server in a thread. A sweep runs through it with the real pinned `evalscope perf`,
the real scraper and records, with no change outside this file; its typed arguments are stored
in the manifest and a resumed run relaunches with them (not with the engine's new defaults)."""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer
from typing import Any, ClassVar, Literal

import pytest
import requests
from support.fake_openai import MODEL, SETS, FakeOpenAI

from harness import engines
from harness.engines import Engine, EngineArgs, EngineOptions, StartContext
from harness.errors import ConfigError
from harness.results import load_run, read_manifest
from harness.run.sweep import SweepRequest, run_sweep
from harness.serve.profiles import Profile


class ToyArgs(EngineArgs):
    kind: Literal["toy"] = "toy"
    greeting: str


class ToyServer:
    """The fake OpenAI server on a free loopback port, with the `Server` protocol."""

    command: ClassVar[list[str]] = ["toy-serve"]
    served_model_name = MODEL

    def __init__(self, args: ToyArgs) -> None:
        self.args = args
        self.starts = 0
        self._open()

    def _open(self) -> None:
        handler = type("Handler", (FakeOpenAI,), {"running": 0, "lock": threading.Lock()})
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._http.daemon_threads = True
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self._http.server_address[1]}"
        self.starts += 1

    def alive(self) -> bool:
        try:
            return requests.get(f"{self.base_url}/health", timeout=5).status_code == 200
        except requests.RequestException:
            return False

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()

    def restart(self) -> None:
        self.stop()
        self._open()

    def provenance(self) -> dict[str, Any]:
        return {"engine": "toy", "greeting": self.args.greeting, "base_url": self.base_url}


class ToyEngine(Engine):
    kind = "toy"
    record_name = "toy"
    args_model = ToyArgs
    cli_name = "toy"
    judges_replies = False  # the fake returns no token ids: nothing to judge
    machine_preflight = False
    needs_gpus = False

    def __init__(self, greeting: str) -> None:
        self.greeting = greeting

    def args_from_options(self, options: EngineOptions) -> EngineArgs:
        options.reject_sim_options()
        if options.url:
            raise ConfigError("--engine toy serves its own fake; --url attaches to a server")
        return ToyArgs(greeting=self.greeting)

    def check_before_run(self, profile: Profile, args: EngineArgs, port: int | None) -> None:
        """Binds a free port of its own: nothing can be busy."""

    def start(self, profile: Profile, args: EngineArgs, ctx: StartContext) -> ToyServer:
        assert isinstance(args, ToyArgs)
        ctx.echo(f"toy engine says {args.greeting}")
        return ToyServer(args)


@pytest.fixture
def toy():
    engines.register(ToyEngine("hello from the first start"))
    yield
    engines.unregister("toy")


def test_a_sweep_runs_through_a_registered_toy_engine_and_resumes_with_its_args(
    toy, small_dataset, tmp_path
):
    def cut(msg: str) -> None:
        if msg.startswith("  p001-n0001-r0: "):
            raise KeyboardInterrupt

    request = SweepRequest(
        "cpu-tiny",
        overrides=SETS,
        dataset=str(small_dataset),
        engine="toy",
        out=tmp_path,
        run_id="toy",
    )
    with pytest.raises(KeyboardInterrupt):
        run_sweep(request, echo=cut)
    run_dir = tmp_path / "toy"
    manifest = read_manifest(run_dir)
    assert manifest.status == "partial"
    assert manifest.engine == "toy"
    assert manifest.engine_spec is not None and manifest.engine_spec.kind == "toy"
    assert manifest.engine_spec.args == {"greeting": "hello from the first start"}
    assert not manifest.simulated
    assert "coherence: not applicable to engine toy" in manifest.notes

    # The engine's defaults change; the resumed run keeps the arguments it recorded.
    engines.register(ToyEngine("a different greeting"))
    lines: list[str] = []
    run_sweep(SweepRequest(resume=run_dir), echo=lines.append)
    assert "toy engine says hello from the first start" in lines
    run = load_run(run_dir)
    assert run.manifest.status == "complete"
    assert run.manifest.launch["greeting"] == "hello from the first start"
    assert [p.point_id for p in run.points] == ["p001-n0001-r0", "p002-n0002-r0"]
    for point in run.points:
        assert point.valid, point.invalid_reasons
        assert point.client is not None and point.client.total_requests == point.expected_requests


def test_the_toy_engine_refuses_options_it_does_not_take(toy):
    with pytest.raises(ConfigError, match="--engine sim only"):
        SweepRequest("cpu-tiny", engine="toy", time_scale=2.0)
    with pytest.raises(ConfigError, match="--url"):
        SweepRequest("cpu-tiny", engine="toy", url="http://127.0.0.1:1")
    assert "toy" in engines.cli_choices()


def test_an_unregistered_engine_is_a_clear_error():
    with pytest.raises(ConfigError, match="--engine 'toy': expected one of"):
        SweepRequest("cpu-tiny", engine="toy")
