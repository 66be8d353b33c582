"""Issue 26: `repro sim serve` sheds load. A body larger than the context could hold is refused
before it is read (413), a non-streamed request whose client went away is aborted as vLLM
aborts it, and SIGTERM stops the server while a tokenization is still running."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from harness.serve.lifecycle import free_port
from harness.sim.serve.app import body_limit

HANG_GUARD_S = 60.0  # only ends a test that would otherwise hang; never decides a verdict


def _chat(content: str, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": content}], **extra}


def test_body_limit_is_derived_from_max_model_len() -> None:
    assert body_limit(142_000) == 142_000 * 16 + 2**20  # 3.2 MiB for hisparse384
    assert body_limit(1_048_576) == 17 * 2**20  # the 1M-context profiles


def test_a_body_larger_than_the_context_is_refused_before_it_is_read(
    sim_http_server: tuple[str, Any],
) -> None:
    url, state = sim_http_server
    limit = body_limit(state.max_model_len)
    big = json.dumps(_chat("x " * (limit // 2 + 10), max_tokens=1)).encode()
    http = requests.Session()
    http.trust_env = False
    answer = http.post(f"{url}/v1/chat/completions", data=big, timeout=HANG_GUARD_S)
    assert answer.status_code == 413 and f"at most {limit:,}" in answer.json()["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while read
        for start in range(0, len(big), 2**20):
            yield big[start : start + 2**20]

    answer = http.post(f"{url}/v1/chat/completions", data=chunks(), timeout=HANG_GUARD_S)
    assert answer.status_code == 413
    ok = http.post(f"{url}/v1/chat/completions", json=_chat("hi", max_tokens=2), timeout=60)
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 2


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000 + b"]" * 100_000,
        json.dumps(
            {"messages": [{"role": "\x00repro-content-7\x00", "content": "a"}], "max_tokens": 1}
        ).encode(),
        json.dumps(
            {"messages": [{"role": "\x00repro-content-" + "9" * 5000 + "\x00", "content": "a"}]}
        ).encode(),
    ],
    ids=["deep-json", "marker-in-role", "marker-5000-digits"],
)
def test_hostile_bodies_are_400_not_500(sim_http_server: tuple[str, Any], body: bytes) -> None:
    url, _state = sim_http_server
    http = requests.Session()
    http.trust_env = False
    answer = http.post(f"{url}/v1/chat/completions", data=body, timeout=60)
    assert answer.status_code == 400, (answer.status_code, answer.text[:300])


def test_a_non_streamed_request_whose_client_left_is_aborted(
    sim_http_server: tuple[str, Any],
) -> None:
    url, state = sim_http_server
    host, port = url.removeprefix("http://").split(":")
    # 100,000 tokens take minutes of virtual time: only an abort frees the slot soon
    body = json.dumps(_chat("hello there", max_tokens=100_000)).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json"
        f"\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    client = socket.create_connection((host, int(port)))
    client.sendall(head + body)
    deadline = time.monotonic() + HANG_GUARD_S
    while not state.live.sched.running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert state.live.sched.running, "the request never started"
    client.close()  # the client times out and goes away
    while state.live.sched.running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not state.live.sched.running and not state.live._handles  # aborted, slot freed


BLOCKING_SERVER = """
import sys, threading
from pathlib import Path
from harness.sim.serve import tokens
marker = Path(sys.argv[1])
def stuck(self, messages):  # a tokenization that never ends (a 100 MB body on a slow core)
    marker.write_text("tokenizing")
    threading.Event().wait()
tokens.PromptCounter.prompt = stuck
sys.argv = ["repro", *sys.argv[2:]]
from harness.cli import main
main()
"""


def test_tokenization_runs_on_daemon_threads(sim_http_server: tuple[str, Any]) -> None:
    _url, state = sim_http_server
    names = {t.name: t.daemon for t in threading.enumerate() if t.name.startswith("tokenize-")}
    assert names and all(names.values()) and state.tokenize is not None


def test_sigterm_stops_the_server_while_it_tokenizes(
    tmp_path: Path, sim_http_server: tuple[str, Any]
) -> None:
    # before: ThreadPoolExecutor workers are joined at exit, so the process outlived SIGTERM for
    # as long as the encode ran (measured by hand: a 15 MB body on hisparse384-1m, 88.7 s after
    # SIGTERM on main, 6.3 s with daemon tokenizer threads); here the encode never ends
    marker, port = tmp_path / "tokenizing", free_port()
    args = ["sim", "serve", "--profile", "hisparse384", "--tokenizer", "tiny:tokenizer"]
    proc = subprocess.Popen(
        [sys.executable, "-c", BLOCKING_SERVER, str(marker), *args, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    try:
        http = requests.Session()
        http.trust_env = False
        deadline = time.monotonic() + 3 * HANG_GUARD_S
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if http.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                time.sleep(0.2)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
        client = socket.create_connection(("127.0.0.1", port))
        body = json.dumps(_chat("hi", max_tokens=4)).encode()
        client.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "the request never reached the tokenizer"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=HANG_GUARD_S)  # TimeoutExpired: SIGTERM did not stop it
        client.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
