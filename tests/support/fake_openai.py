"""A tiny loopback fake OpenAI server (faults a real vLLM cannot produce on demand), its pytest
fixtures and the small sweep settings the fault tests use (registered in tests/run/conftest.py)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.results import read_manifest
from harness.run.sweep import SweepRequest, run_sweep

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
    # the fake returns no token ids, so a coherence check could only be "unjudged" (which
    # invalidates points): it is tested against the real server (tests/e2e, tests/run)
    "coherence=null",
    "sweep.points=[[1,1],[2,2]]",
    "sweep.max_tokens=8",
    "sweep.scrape_interval_s=0.5",
    "sweep.sleep_between_points_s=0",
    "sweep.warmup_requests=1",
    "sweep.point_timeout_s=120",
]


@pytest.fixture
def partial_run(fake_server, small_dataset: Path, tmp_path: Path) -> Path:
    """A real two-point run, cut after its first point (status partial)."""

    def cut(msg: str) -> None:
        if msg.startswith("  p001-n0001-r0: "):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(
            SweepRequest(
                "cpu-tiny",
                overrides=SETS,
                dataset=str(small_dataset),
                url=fake_server(),
                out=tmp_path,
                run_id="cut",
            ),
            echo=cut,
        )
    run = tmp_path / "cut"
    assert read_manifest(run).status == "partial"
    return run
