"""Versioned probe sets: launch/coherence/probes/<name>-v<version>.yaml -> `ProbeSet`.

A probe set is data. Its sha256 (canonical JSON of everything that shapes a request) is stored
with every recorded reference, so an edited probe set that kept its version is caught.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, PositiveInt, ValidationError, model_validator

from harness.config import parse_yaml, read_text
from harness.errors import ConfigError
from harness.paths import LAUNCH_DIR

COHERENCE_DIR = LAUNCH_DIR / "coherence"
PROBES_DIR = COHERENCE_DIR / "probes"
REFERENCES_DIR = COHERENCE_DIR / "references"
_KEY = re.compile(r"^(?P<name>[a-z0-9][a-z0-9_.-]*)-v(?P<version>[0-9]+)$")


class Probe(BaseModel, extra="forbid"):
    id: str
    prompt: str = Field(min_length=1)
    expect: list[str] = Field(default_factory=list)  # any of these substrings = answered


class ProbeSet(BaseModel, extra="forbid"):
    name: str
    version: PositiveInt
    description: str = ""
    api: Literal["completions", "chat"]
    max_tokens: PositiveInt
    ignore_eos: bool
    extra: dict[str, Any] = Field(default_factory=dict)  # merged into every request body
    probes: list[Probe] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_ids(self) -> ProbeSet:
        ids = [p.id for p in self.probes]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"duplicate probe ids: {', '.join(dup)}")
        return self

    @property
    def key(self) -> str:
        return f"{self.name}-v{self.version}"

    @property
    def sha256(self) -> str:
        data = self.model_dump(mode="json", exclude={"description"})
        blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()


def probe_set_path(key: str, probes_dir: Path | None = None) -> Path:
    return (probes_dir or PROBES_DIR) / f"{key}.yaml"


def load_probe_set(key: str, probes_dir: Path | None = None) -> ProbeSet:
    """Load probe set `key` (e.g. "tiny-v1"); the file's name and version must match the key."""
    match = _KEY.match(key)
    folder = probes_dir or PROBES_DIR
    if not match:
        raise ConfigError(f"probe set {key!r}: expected NAME-vVERSION, e.g. tiny-v1")
    path = probe_set_path(key, folder)
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in folder.glob("*.yaml"))) or "none"
        raise ConfigError(f"probe set {key!r}: no {path} (known: {known})")
    raw = parse_yaml(read_text(path, "probe set"), path)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a probe set must be a mapping")
    try:
        probe_set = ProbeSet.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "(top)"
        msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        raise ConfigError(f"{path}: {loc}: {msg}") from None
    if (probe_set.name, str(probe_set.version)) != (match["name"], match["version"]):
        raise ConfigError(
            f"{path}: name/version {probe_set.name!r} v{probe_set.version} differ from the "
            f"file name {key!r}"
        )
    return probe_set
