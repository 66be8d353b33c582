"""Greedy probes over the OpenAI API (requests), token counting and the server's counters.

Replies are compared on generated token ids (`return_token_ids`, vLLM >= 0.10), so a reasoning
parser that moves text between `content` and `reasoning` cannot hide or fake a difference.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, Field

from harness import metric_names as mn
from harness.coherence.probes import ProbeSet
from harness.errors import ServerError

SPEC_COUNTERS = {
    "drafts": mn.total(mn.SPEC_DECODE_NUM_DRAFTS),
    "draft_tokens": mn.total(mn.SPEC_DECODE_NUM_DRAFT_TOKENS),
    "accepted": mn.total(mn.SPEC_DECODE_NUM_ACCEPTED_TOKENS),
}
# Evidence that KV left the GPU: offload stores, HiSparse host->device traffic, preemptions.
SPILL_COUNTERS = {
    "offload_store_bytes": (mn.total(mn.KV_OFFLOAD_STORE_BYTES),),
    "offload_gpu_to_cpu_bytes": (mn.total(mn.KV_OFFLOAD_TOTAL_BYTES),),
    "hisparse_h2d_bytes": (mn.total(mn.HISPARSE_HOST_TO_DEVICE_BYTES),),
    "preemptions": (mn.total(mn.NUM_PREEMPTIONS),),
}


class Reply(BaseModel, extra="forbid"):
    id: str
    token_ids: list[int] = Field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None


def session() -> requests.Session:
    http = requests.Session()
    http.trust_env = False  # loopback servers must never go through an environment proxy
    return http


def request_body(probe_set: ProbeSet, model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": False,
        "return_token_ids": True,
        "ignore_eos": probe_set.ignore_eos,
        **probe_set.extra,
    }
    if probe_set.api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def _endpoint(base_url: str, api: str) -> str:
    return f"{base_url}/v1/{'chat/completions' if api == 'chat' else 'completions'}"


def complete(
    http: requests.Session,
    base_url: str,
    probe_set: ProbeSet,
    model: str,
    *,
    probe_id: str,
    prompt: str,
    max_tokens: int,
    timeout_s: float,
) -> Reply:
    """One greedy request; raises ServerError naming the probe on any failure."""
    body = request_body(probe_set, model, prompt, max_tokens)
    url = _endpoint(base_url, probe_set.api)
    try:
        response = http.post(url, json=body, timeout=timeout_s)
    except requests.RequestException as exc:
        raise ServerError(f"probe {probe_id}: {url}: {type(exc).__name__}: {exc}") from None
    if response.status_code != 200:
        raise ServerError(f"probe {probe_id}: HTTP {response.status_code}: {response.text[:300]}")
    choice = (response.json().get("choices") or [{}])[0]
    token_ids = choice.get("token_ids")
    if token_ids is None:
        raise ServerError(
            f"probe {probe_id}: the server returned no token_ids (return_token_ids needs "
            "vLLM >= 0.10); token agreement cannot be measured"
        )
    if probe_set.api == "chat":
        message = choice.get("message") or {}
        parts = (message.get(k) for k in ("reasoning", "reasoning_content", "content"))
        text = "".join(p for p in parts if isinstance(p, str))
    else:
        text = choice.get("text") or ""
    return Reply(
        id=probe_id,
        token_ids=[int(t) for t in token_ids],
        text=text,
        finish_reason=choice.get("finish_reason"),
    )


def run_probes(base_url: str, probe_set: ProbeSet, model: str, *, timeout_s: float) -> list[Reply]:
    """Every probe, one at a time: no batching, so the arm's numerics are its own."""
    http = session()
    return [
        complete(
            http,
            base_url,
            probe_set,
            model,
            probe_id=probe.id,
            prompt=probe.prompt,
            max_tokens=probe_set.max_tokens,
            timeout_s=timeout_s,
        )
        for probe in probe_set.probes
    ]


def count_tokens(base_url: str, model: str, text: str, *, timeout_s: float = 120.0) -> int:
    """Tokens of `text` by the server's own tokenizer (POST /tokenize)."""
    body = {"model": model, "prompt": text, "add_special_tokens": False}
    try:
        response = session().post(f"{base_url}/tokenize", json=body, timeout=timeout_s)
    except requests.RequestException as exc:
        raise ServerError(f"{base_url}/tokenize: {type(exc).__name__}: {exc}") from None
    if response.status_code != 200:
        raise ServerError(f"{base_url}/tokenize: HTTP {response.status_code}")
    return int(response.json()["count"])


def served_model(base_url: str, *, timeout_s: float = 30.0) -> tuple[str, str | None]:
    """(served name, model root) of the first model listed by /v1/models."""
    try:
        response = session().get(f"{base_url}/v1/models", timeout=timeout_s)
        data = response.json().get("data") or []
    except (requests.RequestException, ValueError) as exc:
        raise ServerError(f"{base_url}/v1/models: {type(exc).__name__}: {exc}") from None
    if not data:
        raise ServerError(f"{base_url}/v1/models lists no model")
    return str(data[0]["id"]), data[0].get("root")


def counter_totals(text: str, names: Iterable[str]) -> dict[str, float]:
    """Sum over all labels (engines, positions) of each named counter sample in /metrics text."""
    wanted = set(names)
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                totals[sample.name] = totals.get(sample.name, 0.0) + float(sample.value)
    return totals


def read_counters(base_url: str, names: Iterable[str], *, timeout_s: float = 30.0) -> dict:
    try:
        response = session().get(f"{base_url}/metrics", timeout=timeout_s)
    except requests.RequestException as exc:
        raise ServerError(f"{base_url}/metrics: {type(exc).__name__}: {exc}") from None
    if response.status_code != 200:
        raise ServerError(f"{base_url}/metrics: HTTP {response.status_code}")
    return counter_totals(response.text, names)
