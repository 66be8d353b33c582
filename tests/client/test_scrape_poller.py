"""The /metrics poller against a loopback endpoint that answers, fails and hangs."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness.client.scrape import Scraper, read_samples_csv, write_samples_csv

GOOD = (
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
    'vllm:num_requests_running{engine="1",model_name="m"} 2.0\n'
    "# TYPE vllm:num_preemptions_total counter\n"
    'vllm:num_preemptions_total{engine="0",model_name="m"} 4.0\n'
    'vllm:num_preemptions_created{engine="0",model_name="m"} 1.0e9\n'
)


@pytest.fixture
def endpoint():
    behaviour = {"mode": "ok"}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            mode = behaviour["mode"]
            if mode == "hang":
                time.sleep(1.5)
            code, body = (200, GOOD) if mode == "ok" else (500, "broken")
            try:
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())
            except BrokenPipeError:
                pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics", behaviour
    server.shutdown()
    server.server_close()


def test_samples_have_both_clocks_and_engine_sum(endpoint, tmp_path):
    url, _ = endpoint
    scraper = Scraper(url, interval_s=0.1)
    before_wall, before_mono = time.time(), time.monotonic()
    assert scraper.scrape_now()
    assert scraper.last_running == 5.0
    names = sorted({s.name for s in scraper.samples})
    assert names == ["vllm:num_preemptions_total", "vllm:num_requests_running"]
    for s in scraper.samples:
        assert before_wall <= s.timestamp <= time.time()
        assert before_mono <= s.monotonic <= time.monotonic()
    path = tmp_path / "samples.csv"
    write_samples_csv(path, scraper.samples)
    assert path.read_text().splitlines()[0] == "timestamp,monotonic,name,labels,value"
    assert read_samples_csv(path) == scraper.samples


def test_failures_and_hangs_are_gaps_and_polling_goes_on(endpoint):
    url, behaviour = endpoint
    scraper = Scraper(url, interval_s=0.1, timeout_s=0.5)
    behaviour["mode"] = "error"
    assert not scraper.scrape_now()
    behaviour["mode"] = "hang"
    assert not scraper.scrape_now()
    assert [g.reason.split(":")[0] for g in scraper.gaps] == ["HTTP 500", "ReadTimeout"]
    behaviour["mode"] = "ok"
    scraper.start()
    deadline = time.monotonic() + 60  # polling goes on: wait for its scrapes, not for a time
    while scraper.scrapes_ok < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    scraper.stop()
    assert scraper.scrapes_ok >= 3
    # One instant per successful scrape, shared by all of its samples.
    assert len({s.monotonic for s in scraper.samples}) == scraper.scrapes_ok
    assert len(scraper.samples) == 3 * scraper.scrapes_ok
