"""Prompt tokens as the real server would count them, fast enough for 74K-token histories.

The chat template is rendered once per request with every message content replaced by a marker,
so the rendered text splits into template pieces and contents. Contents are encoded alone and
cached by their text (a 13-turn conversation re-sends the same 74K-token pad 13 times); template
pieces are tiny. Joining them gives the ids of the full render exactly when every seam is a
pre-tokenizer boundary, which holds for templates that wrap contents in special tokens and
newlines (ChatML, GLM); `verify()` checks it against one full encode.

Prefix identity: a chain hash over full blocks of ids, as vLLM's prefix cache hashes blocks.
"""

from __future__ import annotations

import asyncio
import hashlib
import queue
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.dataset.tok import TokenizerHandle
from harness.errors import ReproError

MARK = "\x00repro-content-{}\x00"
_MARK_RE = re.compile("\x00repro-content-(\\d+)\x00")


class BadRequest(ReproError):
    """A request body the server refuses (HTTP 400), with vLLM-like wording."""


class DaemonPool:
    """A few daemon threads that run blocking calls for the event loop. Unlike
    ThreadPoolExecutor's workers, which the interpreter joins at exit, a daemon thread busy in a
    long encode does not keep the process alive after SIGTERM has stopped the server."""

    def __init__(self, workers: int) -> None:
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._work, name=f"tokenize-{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            loop, future, fn, args = job
            outcome: tuple[Any, BaseException | None]
            try:
                outcome = (fn(*args), None)
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                outcome = (None, exc)
            try:
                loop.call_soon_threadsafe(_settle, future, *outcome)
            except RuntimeError:  # the loop has closed: the server is stopping
                return

    async def run(self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> Any:
        future = loop.create_future()
        self._jobs.put((loop, future, fn, args))
        return await future

    def shutdown(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)


def _settle(future: asyncio.Future, result: Any, exc: BaseException | None) -> None:
    if future.done():  # its request was cancelled meanwhile
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


@dataclass(frozen=True)
class Prompt:
    ids: np.ndarray  # int32 token ids of the rendered prompt
    block_hashes: list[bytes]  # chain hash per full block

    @property
    def tokens(self) -> int:
        return len(self.ids)


def block_hashes(ids: np.ndarray, block: int, start: list[bytes] | None = None) -> list[bytes]:
    """Chain hashes of the full blocks of `ids` (continuing `start`, the hashes of a prefix)."""
    out = list(start or [])
    prev = out[-1] if out else b""
    data = np.ascontiguousarray(ids, dtype=np.int32)
    for k in range(len(out), len(data) // block):
        prev = hashlib.blake2b(
            prev + data[k * block : (k + 1) * block].tobytes(), digest_size=16
        ).digest()
        out.append(prev)
    return out


class PromptCounter:
    """Token ids of chat requests with one tokenizer; thread-safe (encodes run off the loop)."""

    def __init__(self, spec: str, block_tokens: int, cache_tokens: int = 64_000_000) -> None:
        self.tok = TokenizerHandle(spec)
        self.block = block_tokens
        self.cache_tokens = cache_tokens
        self._cache: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._cached = 0
        self._lock = threading.Lock()
        self.words = self.tok.word_ids
        self._word_text = [self.tok.decode([int(i)]) for i in self.words]

    # ------------------------------------------------------------------ contents
    @staticmethod
    def key(text: str) -> bytes:
        return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()

    def _content_ids(self, text: str) -> np.ndarray:
        key = self.key(text)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        ids = self.tok.encode([text])[0] if text else np.zeros(0, dtype=np.int32)
        self._store(key, ids)
        return ids

    def remember(self, text: str, ids: np.ndarray) -> None:
        """Cache a content's ids (the server registers its own replies as it writes them)."""
        self._store(self.key(text), ids)

    def _store(self, key: bytes, ids: np.ndarray) -> None:
        with self._lock:
            if key in self._cache:
                return
            self._cache[key] = ids
            self._cached += len(ids)
            while self._cached > self.cache_tokens and len(self._cache) > 1:
                _, old = self._cache.popitem(last=False)
                self._cached -= len(old)

    def prewarm(self, texts: list[str], store: Path | None = None) -> int:
        """Encode `texts` ahead of the requests that will carry them (a dataset's contents), so
        a 74K-token first turn costs a lookup, not an encode; counts are the same either way.
        `store` keeps the ids on disk for the next server start. Returns the texts encoded."""
        keys = [self.key(t) for t in texts]
        known: dict[bytes, np.ndarray] = {}
        if store is not None and store.is_file():
            with np.load(store) as data:
                flat, offsets, digests = data["ids"], data["offsets"], data["keys"]
            for i, digest in enumerate(digests):
                known[bytes(digest)] = flat[offsets[i] : offsets[i + 1]]
        todo = [(k, t) for k, t in zip(keys, texts, strict=True) if k not in known and t]
        todo = list(dict(todo).items())
        for start in range(0, len(todo), 16):
            part = todo[start : start + 16]
            for (k, _), ids in zip(part, self.tok.encode([t for _, t in part]), strict=True):
                known[k] = ids
        for k, ids in known.items():
            self._store(k, ids)
        if store is not None and todo:
            items = list(known.items())
            offsets = np.cumsum([0] + [len(v) for _, v in items])
            store.parent.mkdir(parents=True, exist_ok=True)
            tmp = store.with_name(store.name + ".tmp.npz")
            np.savez(
                tmp,
                ids=np.concatenate([v for _, v in items]).astype(np.int32),
                offsets=offsets,
                keys=np.array([np.frombuffer(k, np.uint8) for k, _ in items]),
            )
            tmp.replace(store)
        return len(todo)

    # ------------------------------------------------------------------ prompts
    def _render(self, messages: list[dict[str, Any]]) -> tuple[str, list[str]]:
        contents: list[str] = []
        marked = []
        for i, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise BadRequest(f"messages[{i}]: expected an object with a string 'role'")
            content = message.get("content")
            if isinstance(content, list):  # OpenAI content parts: text parts only
                texts = [p.get("text", "") for p in content if isinstance(p, dict)]
                content = "".join(t for t in texts if isinstance(t, str))
            if content is None:
                content = ""
            if not isinstance(content, str):
                raise BadRequest(f"messages[{i}].content: expected a string")
            contents.append(content)
            marked.append({**message, "content": MARK.format(i)})
        try:
            rendered = self.tok.render(marked, add_generation_prompt=True)
        except Exception as exc:  # noqa: BLE001 - template errors are the client's input
            raise BadRequest(f"chat template failed: {exc}") from None
        return rendered, contents

    def prompt(self, messages: list[dict[str, Any]]) -> Prompt:
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages: expected a non-empty list")
        rendered, contents = self._render(messages)
        parts: list[np.ndarray] = []
        pos = 0
        seen: set[int] = set()
        for match in _MARK_RE.finditer(rendered):
            # a marker the request itself carries (in a role or a name) must not pick a content
            # (nor hand int() a 5,000-digit index): each marker names one content, once
            digits = match.group(1)
            index = int(digits) if len(digits) <= 9 else -1
            if not 0 <= index < len(contents) or index in seen:
                raise BadRequest("messages: a field holds the server's reserved marker text")
            seen.add(index)
            if match.start() > pos:
                parts.append(self._content_ids(rendered[pos : match.start()]))
            parts.append(self._content_ids(contents[index]))
            pos = match.end()
        if pos < len(rendered):
            parts.append(self._content_ids(rendered[pos:]))
        ids = np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, np.int32)
        return Prompt(ids, block_hashes(ids, self.block))

    def full_ids(self, messages: list[dict[str, Any]]) -> np.ndarray:
        """The ids of one full encode of the render (the reference `prompt` must equal)."""
        text = self.tok.render(messages, add_generation_prompt=True)
        return self.tok.encode([text])[0]

    # ------------------------------------------------------------------ replies
    def reply(self, seed: int, n: int) -> tuple[np.ndarray, list[str]]:
        """n whole-word ids (they decode and re-encode to themselves) and their texts."""
        idx = np.random.default_rng(seed).integers(0, len(self.words), n)
        return self.words[idx], [self._word_text[i] for i in idx]
