"""Plain HTTP to a vLLM server: a session that never uses a proxy, and what a live server says
about itself."""

from __future__ import annotations

from typing import Any

import requests

from harness.serve.provenance import cache_config_labels


def loopback_session() -> requests.Session:
    session = requests.Session()
    session.trust_env = False  # never route loopback through a proxy from the environment
    return session


def live_facts(base_url: str, metrics_url: str) -> dict[str, Any]:
    """/version and the cache-config info labels (`metric_names.CACHE_CONFIG_INFO`) from a
    running server: its base URL and the metrics endpoint it names (`Server.metrics_url`)."""
    http = loopback_session()
    facts: dict[str, Any] = {}
    try:
        facts["version"] = http.get(f"{base_url}/version", timeout=5).json()
    except (requests.RequestException, ValueError):
        facts["version"] = None
    try:
        facts["cache_config_info"] = cache_config_labels(http.get(metrics_url, timeout=10).text)
    except (requests.RequestException, ValueError):
        facts["cache_config_info"] = []
    return facts
