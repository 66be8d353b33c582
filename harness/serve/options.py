"""`vllm serve` option tables per vLLM release (harness/data/vllm_serve_options/<version>.yaml).

Every table is `provenance: generated`: written by generate.py from that release's own `vllm serve`
argparser and config classes, either on an installed build (0.32.0, the CPU build) or on the
release's PyPI wheel run over the CPU build's python (0.30.0, 0.33.0). Its `generated_from` block
says which (method, wheel and sha256, python); a table without it is refused, so no table that
was not produced by its release's parser can be shipped again.

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
METHODS = ("installed-build", "wheel-shadow")


@dataclass(frozen=True)
class OptionTable:
    version: str
    provenance: str  # generated (the only kind shipped)
    options: dict[str, dict]
    schemas: dict[str, dict] = field(default_factory=dict)
    generated_from: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        how = self.generated_from.get("method")
        where = f"wheel {self.generated_from.get('wheel')}" if how == "wheel-shadow" else how
        return f"vLLM {self.version} table (generated from its own parser, {where})"


def _read(version: str) -> tuple[dict[str, Any], str]:
    ref = resources.files("harness").joinpath(*TABLE_DIR, f"{version}.yaml")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(ref.read_text(), Loader=loader)
    except OSError as exc:
        raise ConfigError(f"no vLLM option table {version!r} ({ref}): {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{ref}: not a mapping")
    return data, str(ref)


@functools.lru_cache(maxsize=8)
def option_table(version: str) -> OptionTable:
    data, ref = _read(version)
    return table_from(data, ref, version)


def table_from(data: dict[str, Any], ref: str, version: str) -> OptionTable:
    """The table of release `version` read from `ref`, refused unless its parser generated it."""
    if data.get("provenance") != "generated":
        got = data.get("provenance")
        raise ConfigError(f"{ref}: provenance: {got!r}: must be `generated` (by generate.py)")
    source = data.get("generated_from")
    if not isinstance(source, dict) or source.get("method") not in METHODS:
        raise ConfigError(
            f"{ref}: generated_from.method: must be one of {', '.join(METHODS)} "
            "(regenerate the table with generate.py)"
        )
    if source["method"] == "wheel-shadow" and not source.get("wheel_sha256"):
        raise ConfigError(f"{ref}: generated_from.wheel_sha256: missing for a wheel-made table")
    if str(data.get("vllm_version")) != version:
        raise ConfigError(f"{ref}: vllm_version: {data.get('vllm_version')!r}, not {version}")
    if not isinstance(data.get("options"), dict) or not data["options"]:
        raise ConfigError(f"{ref}: options: missing or empty")
    return OptionTable(
        version=version,
        provenance="generated",
        options=dict(data["options"]),
        schemas=dict(data.get("json_schemas") or {}),
        generated_from=dict(source),
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
