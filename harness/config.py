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
import os
import re
import stat
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from harness.errors import ConfigError, ReproError

M = TypeVar("M", bound=BaseModel)

# Bounds on what one file may hold. A config is a few KB; the largest record (a point.json of
# 1,664 requests) is under 1 MB; a built dataset of 128 conversations x 13 turns at 1M tokens
# is ~0.5 GB. Beyond these a file is not what it claims to be, and reading it would only
# exhaust memory ("billion laughs" YAML, /dev/zero linked as a manifest).
MAX_DEPTH = 64  # nesting of mappings/lists (the deepest real file, a profile, has 5)
MAX_YAML_NODES = 200_000  # nodes after alias expansion (the largest real config: ~2,000)
RECORD_BYTES = 64 * 2**20
CONFIG_BYTES = 16 * 2**20
DATA_BYTES = 4 * 2**30
_CAPS = {"record": RECORD_BYTES, "dataset": DATA_BYTES, "built dataset": DATA_BYTES}


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
    """SafeLoader that refuses a key given twice in one mapping (plain YAML keeps the last value
    silently, so a profile could say `max-num-seqs: 4` and serve 8), nesting deeper than
    :data:`MAX_DEPTH`, and aliases that expand to more than :data:`MAX_YAML_NODES` nodes."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0
        self._expanded = 0
        self._sizes: dict[int, int] = {}

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = self.anchors.get(event.anchor)
            if node is not None:
                self._expanded += _node_count(node, self._sizes)
                if self._expanded > MAX_YAML_NODES:
                    raise yaml.composer.ComposerError(
                        None, None,
                        f"aliases expand to more than {MAX_YAML_NODES:,} nodes",
                        event.start_mark,
                    )  # fmt: skip
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(
                    None, None, f"nested deeper than {MAX_DEPTH} levels", mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _node_count(node: yaml.Node, sizes: dict[int, int]) -> int:
    """Nodes under ``node`` counted as an expansion would copy them (memoized per node, so a
    chain of aliases costs linear time to measure, not the exponential size it stands for)."""
    known = sizes.get(id(node))
    if known is not None:
        return known
    total = 1
    if isinstance(node, yaml.MappingNode):
        total += sum(_node_count(k, sizes) + _node_count(v, sizes) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        total += sum(_node_count(item, sizes) for item in node.value)
    sizes[id(node)] = total
    return total


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
    except RecursionError:  # belt and braces: MAX_DEPTH stops composing long before
        raise error(f"{source}: not valid YAML (nested too deeply)") from None


def read_bytes(
    path: Path, what: str, *, error: type[ReproError] = ConfigError, limit: int | None = None
) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (by default the cap for
    ``what``). A FIFO, a device or a folder is refused without blocking on it."""
    cap = limit if limit is not None else _CAPS.get(what, CONFIG_BYTES)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"{path}: {what} not found") from None
    except OSError as exc:
        raise error(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise error(f"{path}: cannot read {what}: not a regular file")
    with os.fdopen(fd, "rb") as handle:
        if info.st_size > cap:
            raise error(f"{path}: {what} of {info.st_size:,} bytes; at most {cap:,} are read")
        try:
            data = handle.read(cap + 1)
        except OSError as exc:
            raise error(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    if len(data) > cap:  # it grew while being read
        raise error(f"{path}: {what} of more than {cap:,} bytes; at most {cap:,} are read")
    return data


def read_text(
    path: Path, what: str, *, error: type[ReproError] = ConfigError, limit: int | None = None
) -> str:
    data = read_bytes(Path(path), what, error=error, limit=limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: cannot read {what}: {exc}") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def json_depth(data: Any) -> int:
    """Nesting depth of parsed JSON (iterative: any depth is measured without recursion)."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            deepest = max(deepest, depth)
            items = value.values() if isinstance(value, dict) else value
            stack.extend((item, depth + 1) for item in items if isinstance(item, dict | list))
    return deepest


def parse_json(text: str | bytes, source: Path | str, *, error: type[ReproError] = ConfigError,
               ) -> Any:  # fmt: skip
    """Strict JSON: NaN/Infinity refused (the harness never writes them), nesting bounded."""
    try:
        data = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise error(f"{source}: not valid JSON (nested deeper than {MAX_DEPTH} levels)") from None
    except ValueError as exc:  # JSONDecodeError, and the constants above
        raise error(f"{source}: not valid JSON ({exc})") from None
    if json_depth(data) > MAX_DEPTH:
        raise error(f"{source}: not valid JSON (nested deeper than {MAX_DEPTH} levels)")
    if _SURROGATE_ESCAPE.search(text if isinstance(text, str) else text.decode("latin-1")):
        lone = _lone_surrogate(data)  # pairs were joined by the parser; a lone one is no text
        if lone is not None:
            raise error(f"{source}: not valid JSON (\\u{ord(lone):04x} is half of a character)")
    return data


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _lone_surrogate(data: Any) -> str | None:
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            for char in value:
                if 0xD800 <= ord(char) <= 0xDFFF:
                    return char
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return None


def read_yaml(path: Path | str, what: str, *, error: type[ReproError] = ConfigError) -> Any:
    """The YAML content of ``path``; ``what`` names the file's kind in the messages."""
    path = Path(path)
    return parse_yaml(read_text(path, what, error=error), path, error=error)


def read_json(path: Path | str, what: str, *, error: type[ReproError] = ConfigError) -> Any:
    """The JSON content of ``path`` (a regular file within the cap for ``what``)."""
    path = Path(path)
    return parse_json(read_text(path, what, error=error), path, error=error)


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
