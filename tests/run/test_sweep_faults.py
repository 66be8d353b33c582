"""Faults a real vLLM cannot produce on demand, against a tiny loopback fake OpenAI server:
an endpoint that answers HTTP 500 (EvalScope exits 0 but reports failures -> point invalid), and a
/metrics endpoint that hangs or fails (gaps recorded, the point still completes and is valid).

The client is the real pinned `evalscope perf`; the scraper, metrics and results code are real.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.results import load_run
from harness.run.sweep import run_sweep

MODEL = "tiny"
PROMPT_TOKENS_PER_MESSAGE = 10


class FakeOpenAI(BaseHTTPRequestHandler):
    """Streams `max_tokens` one-word chunks with a final usage chunk, or fails as configured."""

    protocol_version = "HTTP/1.0"
    mode = "ok"  # "ok" | "chat500"
    metrics_mode = "ok"  # "ok" | "flaky" (alternately hang past the scrape timeout and 500)
    metrics_calls = 0
    running = 0
    lock = threading.Lock()

    def log_message(self, *args: object) -> None:
        pass

    def _json(self, code: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._json(200, {})
        elif self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        elif self.path == "/version":
            self._json(200, {"version": "fake"})
        elif self.path == "/metrics":
            cls = type(self)
            with cls.lock:
                cls.metrics_calls += 1
                call = cls.metrics_calls
            if cls.metrics_mode == "flaky" and call % 3 != 1:
                if call % 3 == 2:
                    time.sleep(6.0)  # beyond the scraper's timeout
                try:
                    self._json(500, {"error": "metrics broken"})
                except BrokenPipeError:  # the scraper gave up waiting: that is the point
                    pass
                return
            text = (
                "# TYPE vllm:num_requests_running gauge\n"
                f'vllm:num_requests_running{{engine="0",model_name="{MODEL}"}} {cls.running}\n'
                "# TYPE vllm:num_preemptions counter\n"
                f'vllm:num_preemptions_total{{engine="0",model_name="{MODEL}"}} 0.0\n'
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)
        else:
            self._json(404, {"error": self.path})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if type(self).mode == "chat500":
            self._json(500, {"error": {"message": "injected failure"}})
            return
        if type(self).mode == "hang" and body.get("stream"):
            time.sleep(120)  # the client's requests never finish: the point must time out
            return
        n = int(body.get("max_tokens") or 8)
        prompt = PROMPT_TOKENS_PER_MESSAGE * len(body.get("messages") or [])
        if not body.get("stream"):
            self._json(
                200,
                {
                    "id": "x",
                    "object": "chat.completion",
                    "model": MODEL,
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "length",
                            "message": {"role": "assistant", "content": "w " * n},
                        }
                    ],
                    "usage": {
                        "prompt_tokens": prompt,
                        "completion_tokens": n,
                        "total_tokens": prompt + n,
                    },
                },
            )
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        cls = type(self)
        with cls.lock:
            cls.running += 1
        try:

            def event(obj: object) -> None:
                self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())
                self.wfile.flush()

            base = {"id": "x", "object": "chat.completion.chunk", "model": MODEL}
            event({**base, "choices": [{"index": 0, "delta": {"role": "assistant"}}]})
            for _ in range(n):
                time.sleep(0.004)
                event({**base, "choices": [{"index": 0, "delta": {"content": "w "}}]})
            event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
            event(
                {
                    **base,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": prompt,
                        "completion_tokens": n,
                        "total_tokens": prompt + n,
                    },
                }
            )
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        finally:
            with cls.lock:
                cls.running -= 1


@pytest.fixture
def fake_server():
    servers = []

    def start(mode: str = "ok", metrics_mode: str = "ok") -> str:
        handler = type(
            "Handler",
            (FakeOpenAI,),
            {
                "mode": mode,
                "metrics_mode": metrics_mode,
                "metrics_calls": 0,
                "running": 0,
                "lock": threading.Lock(),
            },
        )
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def small_dataset(tmp_path: Path) -> Path:
    conversations = [
        [
            {"messages": [{"role": "user", "content": f"conversation {c} turn 0"}]},
            {"messages": [{"role": "user", "content": f"conversation {c} turn 1"}]},
        ]
        for c in range(4)
    ]
    path = tmp_path / "tiny_swe_smith.json"
    path.write_text(json.dumps({"metadata": {"num_turns": 2}, "conversations": conversations}))
    return path


SETS = [
    "sweep.points=[[1,1],[2,2]]",
    "sweep.max_tokens=8",
    "sweep.scrape_interval_s=0.5",
    "sweep.sleep_between_points_s=0",
    "sweep.warmup_requests=1",
    "sweep.point_timeout_s=120",
]


def test_http_500_endpoint_makes_points_invalid(fake_server, small_dataset, tmp_path):
    url = fake_server(mode="chat500")
    run_dir = run_sweep(
        "cpu-tiny",
        overrides=SETS,
        dataset=str(small_dataset),
        url=url,
        out=tmp_path,
        run_id="r500",
        report=False,
        echo=lambda _: None,
    )
    run = load_run(run_dir)
    assert run.manifest.status == "complete"
    assert [p.point_id for p in run.points] == ["p001-n0001-r0", "p002-n0002-r0"]
    for point in run.points:
        assert point.client_exit_code == 0  # EvalScope exits 0 on request failures
        assert point.client is not None and point.client.failed_requests > 0
        assert not point.valid
        assert any("failed requests" in r for r in point.invalid_reasons)
        assert any("warm-up" in n for n in point.notes)  # the warm-up got a 500 as well
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [row["valid"] for row in summary["rows"]] == [False, False]

    # The run is visible to `repro runs list|show`.
    from click.testing import CliRunner

    from harness.cli import cli

    listed = CliRunner().invoke(cli, ["runs", "list", "--out", str(tmp_path)])
    assert listed.exit_code == 0, listed.output
    assert "r500" in listed.output and "0/2/2" in listed.output
    shown = CliRunner().invoke(cli, ["runs", "show", str(run_dir)])
    assert shown.exit_code == 0, shown.output
    assert "p002-n0002-r0" in shown.output and "NO" in shown.output


def test_failing_metrics_endpoint_records_gaps_and_point_completes(
    fake_server, small_dataset, tmp_path
):
    url = fake_server(metrics_mode="flaky")
    sets = [*SETS, "sweep.points=[[2,4]]", "sweep.max_tokens=200", "sweep.scrape_interval_s=1"]
    run_dir = run_sweep(
        "cpu-tiny",
        overrides=sets,
        dataset=str(small_dataset),
        url=url,
        out=tmp_path,
        run_id="gaps",
        report=False,
        echo=lambda _: None,
    )
    (point,) = load_run(run_dir).points
    assert point.valid, point.invalid_reasons
    assert point.client.total_requests == point.expected_requests == 8
    assert point.scrape_gaps >= 1
    assert point.samples >= 1  # every third scrape succeeds
    gaps = json.loads((run_dir / "points" / point.point_id / "scrape_gaps.json").read_text())
    assert len(gaps) == point.scrape_gaps
    assert any("HTTP 500" in g["reason"] for g in gaps)
    assert any("Timeout" in g["reason"] for g in gaps)
    # A single good sample cannot yield a counter delta: null, never 0.
    assert point.metrics["preemptions"] in (None, 0.0)
    assert point.metrics["interactivity"] is not None


def test_existing_run_dir_is_never_overwritten(fake_server, small_dataset, tmp_path):
    (tmp_path / "taken").mkdir()
    from harness.errors import RunError

    with pytest.raises(RunError, match="never overwritten"):
        run_sweep(
            "cpu-tiny",
            overrides=SETS,
            dataset=str(small_dataset),
            url=fake_server(),
            out=tmp_path,
            run_id="taken",
            report=False,
            echo=lambda _: None,
        )


def test_point_timeout_kills_the_client_group_and_invalidates(fake_server, small_dataset, tmp_path):
    url = fake_server(mode="hang")
    sets = [*SETS, "sweep.points=[[1,1]]", "sweep.point_timeout_s=20"]
    started = time.monotonic()
    run_dir = run_sweep(
        "cpu-tiny",
        overrides=sets,
        dataset=str(small_dataset),
        url=url,
        out=tmp_path,
        run_id="timeout",
        report=False,
        echo=lambda _: None,
    )
    assert time.monotonic() - started < 90
    (point,) = load_run(run_dir).points
    assert not point.valid
    assert any("timed out after 20s" in r for r in point.invalid_reasons)
    assert point.client_exit_code != 0
    # Nothing of the client survives: its command line names this run's folder.
    leftovers = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if str(run_dir) in cmd:
                leftovers.append(entry.name)
    assert leftovers == []


def test_resume_from_the_cli_needs_no_profile_and_refuses_another(
    fake_server, small_dataset, tmp_path
):
    from click.testing import CliRunner

    from harness.cli import cli

    runner = CliRunner()
    result = runner.invoke(cli, ["sweep"])
    assert result.exit_code == 2 and "--resume RUN_DIR" in result.output

    def interrupt_after_first_point(msg: str) -> None:
        if msg.startswith("  p001-n0001-r0: "):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(
            "cpu-tiny",
            overrides=SETS,
            dataset=str(small_dataset),
            url=fake_server(),
            out=tmp_path,
            run_id="cut",
            report=False,
            echo=interrupt_after_first_point,
        )
    run = tmp_path / "cut"
    assert load_run(run).manifest.status == "partial"
    result = runner.invoke(cli, ["sweep", "--resume", str(run), "--profile", "cpu-tiny-mtp"])
    assert result.exit_code != 0
    assert "the run used profile 'cpu-tiny'" in str(result.exception)
    result = runner.invoke(cli, ["sweep", "--resume", str(run), "--no-report"])
    assert result.exit_code == 0, result.output
    finished = load_run(run)
    assert finished.manifest.status == "complete"
    assert sorted(p.point_id for p in finished.points) == ["p001-n0001-r0", "p002-n0002-r0"]
