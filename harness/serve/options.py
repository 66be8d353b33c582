"""`vllm serve` option tables per vLLM release (harness/data/vllm_serve_options/<version>.yaml).

A table is either `provenance: generated` (written by generate.py from that release's own
argparser and config classes) or `provenance: assumed` (no parser of that release was available
to generate it: it names the generated table it reuses, `assumed_from`, and why). Validation
against an assumed table is reported as such, never silently as that release's.

`json_schemas` give, for JSON options backed by a vLLM config class, the class's keys (nested
config classes one level deep) and `extra: forbid|allow`, so a wrong key inside a JSON option is
caught without that vLLM installed.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from harness.errors import ConfigError

TABLE_DIR = ("data", "vllm_serve_options")


@dataclass(frozen=True)
class OptionTable:
    version: str
    provenance: str  # generated | assumed
    options: dict[str, dict]
    schemas: dict[str, dict] = field(default_factory=dict)
    assumed_from: str | None = None
    note: str = ""

    @property
    def label(self) -> str:
        if self.provenance == "generated":
            return f"vLLM {self.version} table (generated from its parser)"
        return f"vLLM {self.version} table ASSUMED from {self.assumed_from} ({self.note})"


def _read(version: str) -> dict[str, Any]:
    ref = resources.files("harness").joinpath(*TABLE_DIR, f"{version}.yaml")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(ref.read_text(), Loader=loader)
    except OSError as exc:
        raise ConfigError(f"no vLLM option table {version!r} ({ref}): {exc}") from exc
    if not isinstance(data, dict) or data.get("provenance") not in ("generated", "assumed"):
        raise ConfigError(f"{ref}: provenance: must be `generated` or `assumed`")
    return data


@functools.lru_cache(maxsize=8)
def option_table(version: str) -> OptionTable:
    data = _read(version)
    if data["provenance"] == "generated":
        return OptionTable(
            version=str(data["vllm_version"]),
            provenance="generated",
            options=dict(data["options"]),
            schemas=dict(data.get("json_schemas") or {}),
        )
    base_name = data.get("assumed_from")
    note = str(data.get("note") or "").strip()
    if not base_name or not note:
        raise ConfigError(f"option table {version}: an assumed table needs assumed_from and note")
    base = option_table(str(base_name))
    if base.provenance != "generated":
        raise ConfigError(f"option table {version}: assumed_from {base_name} is not generated")
    schemas = dict(base.schemas)
    schemas.update(data.get("json_schemas") or {})
    return OptionTable(
        version=str(data["vllm_version"]),
        provenance="assumed",
        options=dict(base.options),
        schemas=schemas,
        assumed_from=base.version,
        note=note,
    )


def check_json_keys(value: Any, schema: dict | None, path: str) -> tuple[list[str], list[str]]:
    """(errors, warnings) for the keys of `value` against a config-class schema.

    extra: forbid -> an unknown key is an error (vLLM rejects it); allow -> a warning (the
    class accepts it, but it is not a key we know of).
    """
    errors: list[str] = []
    warnings: list[str] = []
    if schema is None or not isinstance(value, dict):
        return errors, warnings
    fields: dict[str, Any] = schema.get("fields") or {}
    for key, sub in value.items():
        where = f"{path}.{key}"
        if key not in fields:
            known = ", ".join(sorted(fields)) or "none"
            msg = f"{where}: unknown key for {schema.get('class', '?')} (keys: {known})"
            (errors if schema.get("extra") == "forbid" else warnings).append(msg)
            continue
        nested_errors, nested_warnings = check_json_keys(sub, fields[key], where)
        errors += nested_errors
        warnings += nested_warnings
    return errors, warnings
