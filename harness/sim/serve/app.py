"""The HTTP side: OpenAI-compatible routes as vLLM serves them, over the live engine (aiohttp).

Streaming follows vLLM 0.32: the role chunk goes out with the first token, then one chunk per
engine step carrying every token that step emitted (several under MTP), `finish_reason` on the
last token chunk, a usage chunk (`choices: []`) when `stream_options.include_usage` is set, then
`data: [DONE]`. With `reasoning_field` the text goes out as `delta.reasoning` (vLLM with a
reasoning parser), which the pinned EvalScope client drops (docs/pitfalls.md). Generation always runs
to `max_tokens`: the engine models no EOS, so `ignore_eos` changes nothing.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from aiohttp import web

from harness import __version__
from harness.analysis.request_table import first_turn_key
from harness.sim.serve.faults import Faults, FaultState
from harness.sim.serve.live import Handle, LiveEngine
from harness.sim.serve.metrics import SimMetrics
from harness.sim.serve.tokens import BadRequest, DaemonPool, PromptCounter, block_hashes

# Request bodies: at most BODY_BYTES_PER_TOKEN bytes per token of max-model-len, plus 1 MiB for
# the JSON around the messages. The workloads' text runs at ~4.2 bytes per token (a 74K-token
# openhands turn is ~0.31 MB; the 1M-context turn ~4.2 MB); 16 leaves room for JSON-escaped
# non-ASCII text (\uXXXX: 6 bytes per character). hisparse384 (142,000): 3.2 MiB; the -1m
# profiles (1,048,576): 17 MiB. A larger body cannot fit the context anyway: 413 at once,
# before it is read into memory or tokenized (256 MiB let one request take 8 GB).
BODY_BYTES_PER_TOKEN = 16
BODY_OVERHEAD_BYTES = 2**20
# How often a non-streamed request checks that its client is still connected (vLLM aborts a
# request whose client went away, so that it stops taking KV blocks and batch slots).
DISCONNECT_CHECK_S = 0.25


def body_limit(max_model_len: int) -> int:
    return max_model_len * BODY_BYTES_PER_TOKEN + BODY_OVERHEAD_BYTES


@dataclass
class ServeState:
    live: LiveEngine
    counter: PromptCounter
    metrics: SimMetrics
    model: str
    max_model_len: int
    reasoning_field: bool
    faults: FaultState
    pool: ThreadPoolExecutor
    loop: asyncio.AbstractEventLoop | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    # tokenization runs on daemon threads: a 1M-token encode in progress never holds up exit
    tokenize: DaemonPool = field(default_factory=lambda: DaemonPool(2))


def _error(status: int, message: str, kind: str = "BadRequestError") -> web.Response:
    body = {"object": "error", "message": message, "type": kind, "param": None, "code": status}
    return web.json_response(body, status=status)


def decode_body(raw: bytes) -> dict[str, Any]:
    """A chat request's JSON object, or BadRequest (not JSON, not an object, nested too deeply:
    the stdlib parser recurses, and a 100,000-deep array would otherwise be a 500)."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BadRequest("request body is not JSON") from None
    except RecursionError:
        raise BadRequest("request body is nested too deeply") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    try:  # "\ud800" is valid JSON but no text: the tokenizer would raise on it (a 500)
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadRequest(
            f"request body holds a lone surrogate (\\u{ord(exc.object[exc.start]):04x}), "
            "which is not text"
        ) from None
    return body


def _max_tokens(body: dict[str, Any], prompt: int, max_len: int) -> int:
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    if value is None:
        return max(max_len - prompt, 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequest(f"max_tokens: {value!r} must be a positive integer")
    if prompt + value > max_len:
        raise BadRequest(
            f"This model's maximum context length is {max_len} tokens. However, you requested "
            f"{prompt + value} tokens ({prompt} in the messages, {value} in the completion). "
            "Please reduce the length of the messages or completion."
        )
    return value


def conversation_turn(messages: list[Any]) -> tuple[str, int]:
    """The request's conversation (its first-turn key, as the client's per-request table keys
    it) and turn (1 + assistant messages), for the server's request log."""
    turn = 1 + sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
    return first_turn_key(messages), turn


class Routes:
    def __init__(self, state: ServeState) -> None:
        self.s = state

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def models(self, request: web.Request) -> web.Response:
        card = {
            "id": self.s.model,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "vllm",
            "root": self.s.model,
            "parent": None,
            "max_model_len": self.s.max_model_len,
        }
        return web.json_response({"object": "list", "data": [card]})

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": f"sim-{__version__}"})

    async def metrics(self, request: web.Request) -> web.Response:
        if self.s.faults.metrics_hang():
            await asyncio.sleep(3600)
        body = await asyncio.get_running_loop().run_in_executor(None, self.s.metrics.render)
        return web.Response(body=body, content_type="text/plain", charset="utf-8")

    async def chat(self, request: web.Request) -> web.StreamResponse:
        limit = body_limit(self.s.max_model_len)
        if (request.content_length or 0) > limit:
            return _too_large(request.content_length, limit)
        try:
            body = decode_body(await request.read())
        except web.HTTPRequestEntityTooLarge:  # no Content-Length (chunked): counted as read
            return _too_large(None, limit)
        except BadRequest as exc:
            return _error(400, str(exc))
        if body.get("model") not in (None, self.s.model):
            return _error(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError")
        # Faults hit streams only: readiness and the harness's warm-ups are not streamed.
        if body.get("stream"):
            self.s.faults.stream_started()
        if body.get("stream") and self.s.faults.fail_request():
            return _error(
                500, "injected failure (repro sim serve --fail-rate)", "InternalServerError"
            )
        loop = asyncio.get_running_loop()
        try:
            prompt = await self.s.tokenize.run(loop, self.s.counter.prompt, body.get("messages"))
            max_tokens = _max_tokens(body, prompt.tokens, self.s.max_model_len)
        except BadRequest as exc:
            return _error(400, str(exc))
        ids, texts = self.s.counter.reply(
            prompt.tokens * 7919 + len(prompt.block_hashes), max_tokens
        )
        messages = body.get("messages")
        key, turn = conversation_turn(messages) if isinstance(messages, list) else (None, None)
        handle = self.s.live.submit(prompt, max_tokens, asyncio.Queue(), key=key, turn=turn)
        if body.get("stream"):
            opts = body.get("stream_options") or {}
            usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
            return await self._stream(request, handle, texts, ids, usage)
        return await self._whole(request, handle, texts, ids)

    # ------------------------------------------------------------------ responses
    def _finish(self, handle: Handle, ids: np.ndarray, texts: list[str]) -> None:
        out = handle.req.out
        hist = np.concatenate([handle.prompt.ids, ids[:out]])
        hashes = block_hashes(hist, self.s.counter.block, handle.prompt.block_hashes)
        self.s.live.remember_output(handle, hashes)
        if not self.s.reasoning_field:
            self.s.counter.remember("".join(texts[:out]), ids[:out])

    def _usage(self, handle: Handle) -> dict[str, Any]:
        p, c = handle.prompt.tokens, handle.req.out
        return {
            "prompt_tokens": p,
            "total_tokens": p + c,
            "completion_tokens": c,
            "prompt_tokens_details": {"cached_tokens": handle.cached_tokens},
        }

    async def _whole(
        self, request: web.Request, handle: Handle, texts: list[str], ids: np.ndarray
    ) -> web.StreamResponse:
        try:
            finished = await _until_done(request, handle)
        except asyncio.CancelledError:  # the handler was cancelled (client gone, shutdown)
            self.s.live.abort(handle)
            raise
        if not finished:  # the client went away: abort as vLLM does, nobody reads the reply
            self.s.live.abort(handle)
            return web.Response(status=499)
        self._finish(handle, ids, texts)
        text = "".join(texts[: handle.req.out])
        message: dict[str, Any] = {"role": "assistant", "content": text, "reasoning": None}
        if self.s.reasoning_field:
            message.update(content=None, reasoning=text)
        return web.json_response(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": self.s.model,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "logprobs": None,
                        "finish_reason": "length",
                        "stop_reason": None,
                    }
                ],
                "usage": self._usage(handle),
            }
        )

    async def _stream(
        self,
        request: web.Request,
        handle: Handle,
        texts: list[str],
        ids: np.ndarray,
        include_usage: bool,
    ) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        base = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": self.s.model,
        }
        field = "reasoning" if self.s.reasoning_field else "content"
        truncate = self.s.faults.truncate_stream()
        sent = 0
        try:
            while True:
                kind, n = await handle.sink.get()
                if kind == "done":
                    break
                last = not handle.sink.empty() and handle.sink._queue[0][0] == "done"
                frames = []
                if sent == 0:
                    frames.append(
                        {
                            **base,
                            "choices": [
                                {
                                    "index": 0,
                                    "delta": {"role": "assistant", "content": ""},
                                    "logprobs": None,
                                    "finish_reason": None,
                                }
                            ],
                        }
                    )
                delta = {field: "".join(texts[sent : sent + n])}
                sent += n
                frames.append(
                    {
                        **base,
                        "choices": [
                            {
                                "index": 0,
                                "delta": delta,
                                "logprobs": None,
                                "finish_reason": "length" if last else None,
                                **({"stop_reason": None} if last else {}),
                            }
                        ],
                    }
                )
                await resp.write("".join(f"data: {json.dumps(f)}\n\n" for f in frames).encode())
                if truncate and sent * 2 >= handle.req.max_out:
                    self.s.live.abort(handle)
                    request.transport.close()  # type: ignore[union-attr]  # a request being answered has its transport
                    return resp
            self._finish(handle, ids, texts)
            tail = ""
            if include_usage:
                tail = (
                    f"data: {json.dumps({**base, 'choices': [], 'usage': self._usage(handle)})}\n\n"
                )
            await resp.write((tail + "data: [DONE]\n\n").encode())
            await resp.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            self.s.live.abort(handle)
            raise
        return resp


def _too_large(length: int | None, limit: int) -> web.Response:
    size = f"{length:,} bytes" if length is not None else "more bytes than that"
    return _error(
        413, f"request body of {size}: at most {limit:,} for this max-model-len", "PayloadTooLarge"
    )


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def _until_done(request: web.Request, handle: Handle) -> bool:
    """Wait for the request's last event; False as soon as its client has disconnected
    (checked at every engine event, and every DISCONNECT_CHECK_S when none comes)."""
    while True:
        event = asyncio.ensure_future(handle.sink.get())
        while not (await asyncio.wait({event}, timeout=DISCONNECT_CHECK_S))[0]:
            if _client_gone(request):
                event.cancel()
                return False
        if event.result()[0] == "done":
            return True
        if _client_gone(request):
            return False


def make_app(state: ServeState) -> web.Application:
    routes = Routes(state)
    # aiohttp's own cap, above the per-route one (which answers a JSON 413 before reading)
    app = web.Application(client_max_size=body_limit(state.max_model_len))

    async def on_startup(app: web.Application) -> None:
        state.loop = asyncio.get_running_loop()
        state.live.start()

    async def on_cleanup(app: web.Application) -> None:
        state.live.stop()
        print(
            f"sim serve: the engine fell {state.live.lag_s:.3f} virtual s behind the wall clock in "
            f"total; arriving requests found it {state.live.behind_at_arrival_s:.3f} s behind, "
            "summed",
            file=sys.stderr,
            flush=True,
        )
        state.pool.shutdown(wait=False, cancel_futures=True)
        state.tokenize.shutdown()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    app.router.add_get("/health", routes.health)
    app.router.add_get("/v1/models", routes.models)
    app.router.add_get("/version", routes.version)
    app.router.add_get("/metrics", routes.metrics)
    app.router.add_post("/v1/chat/completions", routes.chat)
    return app


def dispatcher(state: ServeState):
    """The engine thread's emit: hand each request's events to its queue on the event loop."""

    def put_all(events: list[tuple[Handle, str, Any]]) -> None:
        for handle, kind, value in events:
            if handle.sink is not None:
                handle.sink.put_nowait((kind, value))

    def emit(events: list[tuple[Handle, str, Any]]) -> None:
        loop = state.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(put_all, events)

    return emit


__all__ = ["Faults", "ServeState", "dispatcher", "make_app"]
