"""The two identities of a run, each defined once.

- **Configuration key** (:func:`configuration_key`, 16 hex): everything that determines what
  was measured - the client workload *and* the server configuration (model, serve flags except
  host/port, build, GPU count). Two runs with the same configuration key are repeats of one
  experiment; `repro sweep --resume` uses it to refuse resuming into a different experiment. It
  is stored in the manifest as ``configuration_key`` (``workload_key`` in repro.run/1).
- **Workload identity** (:func:`workload_identity`, hashed by :func:`workload_id`, 12 hex): only
  what the client sends - dataset checksum, the sweep's points, offset, output length,
  ignore_eos, multi-turn/max-turns - and the per-GPU divisor. Two runs with the same workload
  identity are comparable: serve flags and the build may differ, which is what a comparison or
  a regression verdict is about. The history key embeds the workload id.

Both hashes are part of stored files (manifests, history keys): their values must never change.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

# The sweep fields that define what the client sends; everything else may differ between runs.
WORKLOAD_SWEEP_FIELDS = (
    "points",
    "dataset_offset",
    "max_tokens",
    "ignore_eos",
    "multi_turn",
    "max_turns",
)


def active_think_time(sweep: dict[str, Any]) -> dict[str, Any] | None:
    """The sweep's think time (harness/dataset/thinktime.py) when it pauses at all; the
    identities hash it only then, so those of runs without think time are unchanged."""
    think = sweep.get("think_time")
    if not isinstance(think, dict) or think.get("kind", "none") == "none":
        return None
    if think.get("kind") == "fixed" and not think.get("seconds"):
        return None
    return think


def configuration_key(
    *, dataset_sha256: str, sweep: dict[str, Any], profile: dict[str, Any]
) -> str:
    """16 hex digits over the workload and the server configuration (see the module doc)."""
    serve = {k: v for k, v in (profile.get("serve") or {}).items() if k not in ("host", "port")}
    material = {
        "dataset_sha256": dataset_sha256,
        "points": [list(p) for p in sweep.get("points", [])],
        "dataset_offset": sweep.get("dataset_offset"),
        "max_tokens": sweep.get("max_tokens"),
        "multi_turn": sweep.get("multi_turn"),
        "max_turns": sweep.get("max_turns"),
        "ignore_eos": sweep.get("ignore_eos"),
        "extra_args": sweep.get("extra_args") or {},
        "model": profile.get("model"),
        "serve": serve,
        "build": profile.get("build"),
        "gpus": max(int(profile.get("gpus") or 0), 1),
    }
    if think := active_think_time(sweep):  # only when it pauses: older keys stay as they were
        material["think_time"] = think
    blob = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def workload_identity(manifest_data: dict[str, Any]) -> dict[str, Any]:
    """The fields of a manifest (as JSON data) that must match for two runs to be comparable."""
    sweep = manifest_data.get("sweep") or {}
    dataset = manifest_data.get("dataset") or {}
    identity: dict[str, Any] = {"dataset_sha256": dataset.get("sha256")}
    for key in WORKLOAD_SWEEP_FIELDS:
        value = sweep.get(key)
        identity[key] = [list(p) for p in value] if key == "points" and value else value
    identity["gpus"] = manifest_data.get("gpus")
    if think := active_think_time(sweep):
        identity["think_time"] = think
    return identity


def workload_id(identity: dict[str, Any]) -> str:
    """12 hex digits naming a :func:`workload_identity` (used in history keys)."""
    blob = json.dumps(identity, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def workload_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """``key: a vs b`` for every workload-identity field where two identities differ."""
    return [f"{k}: {a.get(k)!r} vs {b.get(k)!r}" for k in b if a.get(k) != b.get(k)]
