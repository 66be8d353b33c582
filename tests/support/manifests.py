"""The smallest valid run manifest, for tests that need a RunManifest without a run."""

from __future__ import annotations

from typing import Any

from harness.results import RunManifest


def minimal_manifest(**fields: Any) -> RunManifest:
    """A manifest of an attached (`--url`) cpu-tiny run; FIELDS override any key."""
    base: dict[str, Any] = {
        "run_id": "r",
        "status": "running",
        "created_at": 0.0,
        "harness_version": "0",
        "engine": "url",
        "base_url": "http://x",
        "profile_name": "cpu-tiny",
        "profile": {},
        "gpus": 1,
        "dataset": {},
        "configuration_key": "k",
        "client": {},
        "sweep": {},
    }
    return RunManifest.model_validate({**base, **fields})
