"""Counted events on a live server, the triggers for fault tests: a fault timed by "N requests
finished" lands at the same place in a point on any machine, where a sleep or the running gauge
(0 or N on most scrapes of a fast CPU server) does not."""

from __future__ import annotations

import time

import requests
from prometheus_client.parser import text_string_to_metric_families

SUCCESS_TOTAL = "vllm:request_success_total"


def counter_total(base_url: str, name: str) -> float | None:
    """A counter summed over its labels, or None if /metrics did not answer."""
    try:
        text = requests.get(f"{base_url}/metrics", timeout=5).text
    except requests.RequestException:
        return None
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    )


def finished_requests(base_url: str) -> float | None:
    """vllm:request_success_total summed over its labels, or None if /metrics did not answer."""
    return counter_total(base_url, SUCCESS_TOTAL)


def wait_for_finished(base_url: str, at_least: float, timeout_s: float = 900) -> float:
    """Poll until at least `at_least` requests have finished; the count seen."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done = finished_requests(base_url)
        if done is not None and done >= at_least:
            return done
        time.sleep(0.05)
    raise AssertionError(f"{base_url}: fewer than {at_least} requests finished in {timeout_s} s")
