"""The one loader for YAML configuration and JSON record files.

Every schema in `repro` (builds, profiles, policies, claims, capacity models, dataset recipes,
result records) is a strict pydantic model (unknown keys forbidden) read through this module, so
that every bad file gives one message of the same shape, naming the file and the key path of the
first problem::

    launch/policies/x.yaml: key 'metrics.occupancy.flor': unknown key 'flor'
    launch/models/m.yaml: key 'architecture.num_layers': Input should be greater than 0
    results/r/manifest.json: key 'status': required key missing

Reading: :func:`read_yaml` / :func:`parse_yaml` / :func:`read_json` (missing file, unreadable
file, bad syntax); :func:`require_mapping` (the top level must be a mapping); validating:
:func:`validate` (or :func:`load_yaml` for all steps at once), whose message comes from
:func:`describe_error`. The error class is a parameter: configuration is a
:class:`~harness.errors.ConfigError`, a result record a :class:`~harness.errors.RunError`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from harness.errors import ConfigError, ReproError

M = TypeVar("M", bound=BaseModel)


def key_path(loc: tuple[Any, ...] | list[Any]) -> str:
    """pydantic's error location as a dotted key path (model-validator steps left out)."""
    return ".".join(str(part) for part in loc if part not in ("after", "before", "wrap"))


def describe_error(exc: ValidationError, index: int = 0) -> tuple[str, str]:
    """(key path, message) of one error (the first by default): unknown key, missing key or
    the reason."""
    error = exc.errors()[index]
    loc = [part for part in error["loc"] if part not in ("after", "before", "wrap")]
    if error["type"] == "extra_forbidden":
        return key_path(loc), f"unknown key {str(loc[-1]) if loc else '?'!r}"
    if error["type"] == "missing":
        return key_path(loc), "required key missing"
    return key_path(loc), error["msg"].removeprefix("Value error, ")


def at_key(source: Path | str, path: str) -> str:
    """The ``FILE: key 'a.b'`` prefix of a message about one key (``FILE`` alone at the top)."""
    return f"{source}: key {path!r}" if path else f"{source}"


def validation_message(
    source: Path | str, exc: ValidationError, *, prefix: str = "", every: bool = False
) -> str:
    """One line naming the file and key of the first error (``every``: of each error, joined
    by "; "); ``prefix`` is the key path of the validated mapping inside the file (e.g.
    ``builds.b2`` when one entry is validated)."""
    parts = []
    for index in range(len(exc.errors()) if every else 1):
        path, message = describe_error(exc, index)
        full = ".".join(p for p in (prefix, path) if p)
        parts.append(f"key {full!r}: {message}" if full else message)
    return f"{source}: " + "; ".join(parts)


def validate(
    model: type[M],
    data: Any,
    source: Path | str,
    *,
    prefix: str = "",
    every: bool = False,
    error: type[ReproError] = ConfigError,
    **context: Any,
) -> M:
    """``model`` validated from ``data`` (plus ``context`` fields), or ``error`` naming the key
    (of the first problem; of every problem with ``every``)."""
    try:
        if context:
            return model.model_validate({**data, **context})
        return model.model_validate(data)
    except ValidationError as exc:
        raise error(validation_message(source, exc, prefix=prefix, every=every)) from None


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping: plain YAML keeps the last
    value silently, so a profile could say `max-num-seqs: 4` and serve 8."""


def _unique_keys(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _value in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # `<<: *anchor`: SafeLoader's construct_mapping merges it
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: construct_mapping names it below
            continue
        if first is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} given twice (first on line {first + 1})",
                key_node.start_mark,
            )  # fmt: skip
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_keys)


def yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error on one line: ``line L, column C: problem`` (PyYAML's own text spans
    several lines, with a caret drawing)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return where + " ".join(str(problem).split())


def safe_load(text: str | bytes) -> Any:
    """yaml.safe_load, but a key given twice in one mapping is an error."""
    return yaml.load(text, Loader=_StrictLoader)


def parse_yaml(
    text: str | bytes, source: Path | str, *, error: type[ReproError] = ConfigError
) -> Any:
    try:
        return safe_load(text)
    except yaml.YAMLError as exc:
        raise error(f"{source}: not valid YAML ({yaml_problem(exc)})") from None


def read_text(path: Path, what: str, *, error: type[ReproError] = ConfigError) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{path}: {what} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{path}: cannot read {what}: {exc}") from None


def read_yaml(path: Path | str, what: str, *, error: type[ReproError] = ConfigError) -> Any:
    """The YAML content of ``path``; ``what`` names the file's kind in the messages."""
    path = Path(path)
    return parse_yaml(read_text(path, what, error=error), path, error=error)


def read_json(path: Path | str, what: str, *, error: type[ReproError] = ConfigError) -> Any:
    path = Path(path)
    text = read_text(path, what, error=error)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{path}: not valid JSON ({exc})") from None


def require_mapping(
    data: Any, source: Path | str, what: str, *, error: type[ReproError] = ConfigError
) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise error(f"{source}: a {what} must be a mapping of keys, got {type(data).__name__}")
    return data


def load_yaml(path: Path | str, model: type[M], what: str, **context: Any) -> M:
    """Read, check and validate one YAML file against ``model`` (all errors ConfigError)."""
    data = require_mapping(read_yaml(path, what), path, what)
    return validate(model, data, path, **context)
