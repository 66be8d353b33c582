"""A stand-in `vllm` executable for lifecycle faults a real server cannot produce on demand:
ignoring SIGINT/SIGTERM (forces SIGKILL escalation), dying during start-up, never becoming
ready, and leaving a grandchild in the process group. Mode from FAKE_VLLM_MODE:

  ok        serve /health, /v1/models, chat completions; exit on SIGINT
  stubborn  like ok, with a grandchild, and both ignore SIGINT and SIGTERM
  crash     print a traceback-like line and exit 3 during start-up
  hang      never answer /health
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    argv = sys.argv[1:]
    mode = os.environ.get("FAKE_VLLM_MODE", "ok")
    port = int(argv[argv.index("--port") + 1])
    name = argv[argv.index("--served-model-name") + 1] if "--served-model-name" in argv else argv[1]
    print(f"fake vllm {mode} pid={os.getpid()} pgid={os.getpgrp()} argv={argv}", flush=True)
    if mode == "crash":
        print("RuntimeError: engine core failed to start (fake)", flush=True)
        sys.exit(3)
    if mode == "stubborn":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        code = (
            "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
            "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
        )
        child = [sys.executable, "-c", code]
        grandchild = subprocess.Popen(child)
        print(f"grandchild pid={grandchild.pid}", flush=True)
    if mode == "hang":
        time.sleep(600)
    print(
        "INFO CPU KV cache size: 1,536 tokens, Maximum concurrency for 1,024 tokens per "
        "request: 1.50x",
        flush=True,
    )

    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: object, ctype: str = "application/json") -> None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, "")
            elif self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": name, "object": "model"}]})
            elif self.path == "/version":
                self._send(200, {"version": "0.0.0-fake"})
            elif self.path == "/metrics":
                self._send(
                    200,
                    "# HELP vllm:cache_config_info Information of the LLMEngine "
                    "CacheConfig\n# TYPE vllm:cache_config_info gauge\n"
                    'vllm:cache_config_info{block_size="128",engine="0",'
                    'num_gpu_blocks="12"} 1.0\n',
                    "text/plain",
                )
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            self.rfile.read(length)
            self._send(
                200,
                {"choices": [{"message": {"content": "hi"}}], "usage": {"completion_tokens": 4}},
            )

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("fake vllm: SIGINT, shutting down", flush=True)


if __name__ == "__main__":
    main()
