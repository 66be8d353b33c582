"""A third engine added in one file: a toy engine, registered here, that serves the loopback
fake OpenAI server in a thread. A sweep runs through it with the real pinned `evalscope perf`,
the real scraper and records, with no change outside this file; its typed arguments (one from
its own option, `--toy-speed`) are stored in the manifest and a resumed run relaunches with them
(not with the engine's new defaults). Its metrics endpoint is not at /metrics: the scraper finds
it through the server's `metrics_url`. An option of another engine given to it is refused by the
registry's one check."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from http.server import ThreadingHTTPServer
from typing import Any, Literal

import pytest
import requests
from click.testing import CliRunner
from pydantic import Field
from support.fake_openai import MODEL, SETS, FakeOpenAI

from harness import engines
from harness.cli import cli
from harness.engines import Engine, EngineArgs, EngineOption, StartContext
from harness.errors import ConfigError
from harness.results import load_run, read_manifest
from harness.run.sweep import SweepRequest, run_sweep
from harness.serve.profiles import Profile

TOY_METRICS = "/toy/metrics"


class ToyArgs(EngineArgs):
    kind: Literal["toy"] = "toy"
    greeting: str
    toy_speed: float = Field(1.0, gt=0)


class ToyHandler(FakeOpenAI):
    """The fake with its Prometheus endpoint at /toy/metrics and none at /metrics."""

    def do_GET(self) -> None:
        if self.path == "/metrics":
            self._json(404, {"error": "the toy's metrics are at " + TOY_METRICS})
            return
        if self.path == TOY_METRICS:
            self.path = "/metrics"
        super().do_GET()


class ToyServer:
    """The fake OpenAI server on a free loopback port, with the `Server` protocol."""

    served_model_name = MODEL

    def __init__(self, args: ToyArgs) -> None:
        self.command = ["toy-serve"]
        self.args = args
        self.starts = 0
        self._open()

    def _open(self) -> None:
        handler = type("Handler", (ToyHandler,), {"running": 0, "lock": threading.Lock()})
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._http.daemon_threads = True
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self._http.server_address[1]}"
        self.starts += 1

    @property
    def metrics_url(self) -> str:
        return self.base_url + TOY_METRICS

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
        return {
            "engine": "toy",
            "greeting": self.args.greeting,
            "toy_speed": self.args.toy_speed,
            "base_url": self.base_url,
        }


class ToyEngine(Engine):
    kind = "toy"
    record_name = "toy"
    args_model = ToyArgs
    cli_name = "toy"
    judges_replies = False  # the fake returns no token ids: nothing to judge
    machine_preflight = False
    needs_gpus = False

    options = (EngineOption("toy_speed", "--toy-speed", float, "how fast the toy talks."),)

    def __init__(self, greeting: str) -> None:
        self.greeting = greeting
        self.parsed: list[EngineArgs] = []  # what each command line resolved to

    def args_from_options(self, values: Mapping[str, Any]) -> EngineArgs:
        # the greeting is the engine's default of the day; the rest is the base's by-name parse
        args = super().args_from_options({**values, "greeting": self.greeting})
        self.parsed.append(args)
        return args

    def check_before_run(self, profile: Profile, args: EngineArgs, port: int | None) -> None:
        """Binds a free port of its own: nothing can be busy."""

    def start(self, profile: Profile, args: EngineArgs, ctx: StartContext) -> ToyServer:
        assert isinstance(args, ToyArgs)
        ctx.echo(f"toy engine says {args.greeting} at speed {args.toy_speed:g}")
        return ToyServer(args)


@pytest.fixture
def toy():
    engine = engines.register(ToyEngine("hello from the first start"))
    yield engine
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
        toy_speed=3.0,  # its own option, by name, as `repro sweep --toy-speed 3` gives it
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
    assert manifest.engine_spec.args == {"greeting": "hello from the first start", "toy_speed": 3}
    assert not manifest.simulated
    assert "coherence: not applicable to engine toy" in manifest.notes

    # The engine's defaults change; the resumed run keeps the arguments it recorded.
    engines.register(ToyEngine("a different greeting"))
    lines: list[str] = []
    run_sweep(SweepRequest(resume=run_dir), echo=lines.append)
    assert "toy engine says hello from the first start at speed 3" in lines
    run = load_run(run_dir)
    assert run.manifest.status == "complete"
    assert run.manifest.launch["greeting"] == "hello from the first start"
    assert run.manifest.launch["toy_speed"] == 3.0
    assert [p.point_id for p in run.points] == ["p001-n0001-r0", "p002-n0002-r0"]
    for point in run.points:
        assert point.valid, point.invalid_reasons
        assert point.client is not None and point.client.total_requests == point.expected_requests


def test_the_toy_engine_refuses_options_it_does_not_take(toy):
    with pytest.raises(ConfigError) as info:
        SweepRequest("cpu-tiny", engine="toy", time_scale=2.0)
    assert str(info.value) == "--time-scale applies to --engine sim only, not to --engine toy"
    with pytest.raises(ConfigError, match="--set sim.PARAM=VALUE applies to --engine sim only"):
        SweepRequest("cpu-tiny", engine="toy", overrides=["sim.hbm_gib=10"])
    with pytest.raises(
        ConfigError, match="^--url applies to engine url only, not to --engine toy$"
    ):
        SweepRequest("cpu-tiny", engine="toy", url="http://127.0.0.1:1")
    # and the other way round: the toy's option is no other engine's
    with pytest.raises(ConfigError, match="^--toy-speed applies to --engine toy only, not to"):
        SweepRequest("hisparse384", engine="sim", toy_speed=2.0)
    with pytest.raises(ConfigError, match=r"^--toy-speed 0\.0: .*greater than 0 \(engine toy\)$"):
        SweepRequest("cpu-tiny", engine="toy", toy_speed=0.0)
    assert "toy" in engines.cli_choices()
    assert toy.parsed == []  # nothing refused reached the engine's own parse


def test_repro_sweep_takes_the_toy_option_and_refuses_a_sim_one(toy, small_dataset, tmp_path):
    base = ["sweep", "--profile", "cpu-tiny", "--dataset", str(small_dataset), "--engine", "toy"]
    base += [a for s in SETS for a in ("--set", s)]
    assert "--toy-speed" in CliRunner().invoke(cli, ["sweep", "--help"]).output
    done = CliRunner().invoke(
        cli, [*base, "--toy-speed", "2.5", "--dry-run", "--out", str(tmp_path / "out")]
    )
    assert done.exit_code == 0, done.output
    assert toy.parsed[-1].model_dump() == {
        "kind": "toy",
        "greeting": "hello from the first start",
        "toy_speed": 2.5,
    }
    assert not (tmp_path / "out").exists()  # a dry run writes nothing
    refused = CliRunner().invoke(cli, [*base, "--sim-arg=--fail-rate=0.1", "--dry-run"])
    assert isinstance(refused.exception, ConfigError)
    assert str(refused.exception) == "--sim-arg applies to --engine sim only, not to --engine toy"


def test_an_unregistered_engine_is_a_clear_error():
    with pytest.raises(ConfigError, match="--engine 'toy': expected one of"):
        SweepRequest("cpu-tiny", engine="toy")
    with pytest.raises(ConfigError, match="engine option 'toy_speed': no registered engine"):
        SweepRequest("cpu-tiny", toy_speed=2.0)
    assert "--toy-speed" not in CliRunner().invoke(cli, ["sweep", "--help"]).output


def test_an_option_declared_differently_by_two_engines_is_refused(toy):
    class Clash(ToyEngine):
        kind = cli_name = record_name = "clash"
        options = (EngineOption("toy_speed", "--speed", float, "not the toy's flag."),)

    with pytest.raises(
        ConfigError, match="option 'toy_speed' .* declared differently by engine toy"
    ):
        engines.register(Clash("hi"))
    assert "clash" not in engines.kinds()
