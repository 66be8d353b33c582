"""Prefix identity over HTTP: conversations that open with the same system prompt.

Many agentic workloads send one system prompt with every conversation. The simulated server
once keyed a conversation by its first block, so such conversations merged into one, and a
later turn matched only the system prompt instead of its own history. Here two conversations
share a system prompt of several blocks; each one's second turn must be served its own history
from the cache (usage.prompt_tokens_details.cached_tokens), as vLLM's prefix cache serves it.
(What the simulator does not model: B's first turn would also find A's system-prompt blocks in
vLLM; its caches are per conversation, docs/simulator.md §8.)"""

from __future__ import annotations

from typing import Any

import requests

SYSTEM = " ".join(f"rule{i} applies to every conversation here." for i in range(120))
BLOCK = 64


def _turn(url: str, messages: list[dict[str, str]]) -> dict[str, Any]:
    body = {"model": None, "messages": messages, "max_tokens": 24, "stream": False}
    body = {k: v for k, v in body.items() if v is not None}
    r = requests.post(f"{url}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def _opening(topic: str) -> list[dict[str, str]]:
    ask = " ".join(f"{topic} detail {i}." for i in range(150))
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ask}]


def test_each_conversation_continues_its_own_history(sim_http_server):
    url, _state = sim_http_server
    a, b = _opening("alpha"), _opening("beta")
    first_a = _turn(url, a)
    _turn(url, b)  # finishes after A's first turn: the newest history stored
    assert first_a["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    a += [
        {"role": "assistant", "content": first_a["choices"][0]["message"]["content"]},
        {"role": "user", "content": "alpha: go on."},
    ]
    second_a = _turn(url, a)
    history = first_a["usage"]["prompt_tokens"] + first_a["usage"]["completion_tokens"]
    cached = second_a["usage"]["prompt_tokens_details"]["cached_tokens"]
    # all of A's full blocks but the one the template may close differently: far more than the
    # shared system prompt, which is all a merged conversation would have matched
    assert (history // BLOCK - 1) * BLOCK <= cached <= history
    assert cached > first_a["usage"]["prompt_tokens"] // 2
