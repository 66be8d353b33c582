"""Reference replies as data: one file per reference arm and probe-set version.

    launch/coherence/references/<arm>/<probe-set key>.json     (e.g. offload512-nomtp/glm-v1.json)

A nightly compares against the accepted reference without running the reference arm again. A
run's own replies are kept in <run>/coherence/replies.json, so `--against RUN` works too.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, Field, ValidationError

from harness.coherence.client import Reply
from harness.coherence.probes import REFERENCES_DIR, ProbeSet
from harness.errors import ConfigError
from harness.results import atomic_write_json

REFERENCE_SCHEMA: Final = "repro.coherence.replies/1"


class ReplySet(BaseModel, extra="forbid"):
    """Greedy replies of one arm to one probe-set version, with what produced them."""

    schema_version: Literal["repro.coherence.replies/1"] = REFERENCE_SCHEMA
    arm: str  # profile name
    probe_set: str  # key, e.g. tiny-v1
    probe_set_sha256: str
    recorded_at: float = Field(default_factory=time.time)
    build: str | None = None
    model: str | None = None  # profile model spec
    model_root: str | None = None  # as /v1/models reports it
    base_url: str | None = None
    replies: list[Reply]

    def by_id(self) -> dict[str, Reply]:
        return {r.id: r for r in self.replies}


def reference_path(arm: str, probe_key: str, references_dir: Path | None = None) -> Path:
    return (references_dir or REFERENCES_DIR) / arm / f"{probe_key}.json"


def write_replies(path: Path, replies: ReplySet) -> Path:
    atomic_write_json(path, replies)
    return path


def read_replies(path: Path) -> ReplySet:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no recorded replies") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from None
    except (OSError, UnicodeDecodeError) as exc:  # a folder, unreadable, not text
        raise ConfigError(f"{path}: cannot read recorded replies ({exc})") from None
    if not isinstance(data, dict) or data.get("schema_version") != REFERENCE_SCHEMA:
        found = data.get("schema_version") if isinstance(data, dict) else None
        raise ConfigError(f"{path}: schema_version {found!r}, expected {REFERENCE_SCHEMA!r}")
    try:
        return ReplySet.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ConfigError(f"{path}: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None


def check_matches(replies: ReplySet, probe_set: ProbeSet, path: Path) -> None:
    """Recorded replies are only comparable for the very same probe set."""
    if replies.probe_set != probe_set.key:
        raise ConfigError(
            f"{path}: recorded for probe set {replies.probe_set}, not {probe_set.key}"
        )
    if replies.probe_set_sha256 != probe_set.sha256:
        raise ConfigError(
            f"{path}: probe set {probe_set.key} changed since these replies were recorded "
            f"(sha256 {replies.probe_set_sha256[:12]} != {probe_set.sha256[:12]}); a changed "
            "probe set needs a new version and newly recorded references"
        )
