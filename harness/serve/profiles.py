"""Serve profiles: launch/profiles/*.yaml -> validated `Profile` -> exact `vllm serve` command.

The `serve:` block uses vLLM's own config-file keys (long option names). Keys and value types
are checked against the option table of the profile's build (harness/data/vllm_serve_options),
and the keys inside JSON options against the config-class schemas recorded there.
`extends:` merges the parent (deep for serve/sweep/env); a child value of null removes the key.
`workload:` names what the client sends (datasets/workloads/, docs/workloads.md §1): the
resolved `sweep` is the workload's fields under the profile's own `sweep:` block and `--set`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
)

from harness.config import (
    at_key,
    describe_error,
    read_yaml,
    require_mapping,
    safe_load,
    yaml_problem,
)
from harness.errors import ConfigError
from harness.names import PROFILE_NAME_MAX, check_name, for_terminal
from harness.paths import PROFILES_DIR
from harness.serve.builds import Build, get_build, serve_json_schemas, serve_option_table
from harness.serve.options import check_json_keys
from harness.serve.workloads import (
    WORKLOAD_FIELDS,
    WORKLOADS_DIR,
    WorkloadFields,
    known_workloads,
    load_workload_spec,
    workload_path,
)

DEEP_MERGED = ("serve", "sweep", "env", "coherence")
# Set by the harness from top-level profile fields, never inside `serve:`.
RESERVED_SERVE_KEYS = {"model": "model", "host": "host", "port": "port", "config": None}


# The keys a profile's `sweep:` block sets: how the harness runs the points. What the client
# sends is the workload's (harness/serve/workloads.py, docs/workloads.md §1).
RUNNER_FIELDS = (
    "dataset",
    "scrape_interval_s",
    "point_timeout_s",
    "sleep_between_points_s",
    "warmup_requests",
)


class SweepSpec(WorkloadFields):
    """A profile's resolved sweep: its workload's fields, then its own `sweep:` block, then
    `--set sweep.KEY=VALUE`. No default says what the client sends: that is the workload's."""

    dataset: str = "openhands-glm53"
    scrape_interval_s: PositiveFloat = 30.0
    point_timeout_s: PositiveFloat = 10800.0
    sleep_between_points_s: NonNegativeFloat = 5.0
    warmup_requests: NonNegativeInt = 2

    @model_serializer(mode="wrap")
    def _recorded_order(self, dump: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # manifests have always recorded the sweep in this order (the dataset after the
        # points, the runner's settings before the think time): the shared fields come first
        # in declaration order, so the dump is put back in it
        data = dump(self)
        return {**{key: data[key] for key in SWEEP_ORDER if key in data}, **data}


# The order the fields of a resolved sweep are recorded in (see SweepSpec._recorded_order).
SWEEP_ORDER = (
    "points",
    "dataset",
    "dataset_offset",
    "max_tokens",
    "ignore_eos",
    "multi_turn",
    "max_turns",
    "extra_args",
    *RUNNER_FIELDS[1:],
    "think_time",
    "slo",
)


class AgreementSpec(BaseModel, extra="forbid"):
    """Token agreement with the reference arm's recorded greedy replies."""

    tokens: PositiveInt = 32  # compare the first N generated tokens of each probe
    min_prefix: PositiveInt = 32  # a probe agrees if its common prefix reaches this
    min_agreeing: float = Field(default=1.0, ge=0, le=1)  # fraction of probes that must agree
    # mean positional agreement over the N tokens
    min_positional: float = Field(default=1.0, ge=0, le=1)


class GarbageSpec(BaseModel, extra="forbid"):
    """Reference-free signatures; enforce: false only reports them (random-weight models)."""

    enforce: bool = True
    max_repetition: float = Field(default=0.5, ge=0, le=1)  # share of repeated 4-grams
    min_distinct: float = Field(default=0.1, ge=0, le=1)  # distinct tokens / tokens
    max_replacement: int = Field(default=0, ge=0)  # U+FFFD characters in a reply


class AcceptanceSpec(BaseModel, extra="forbid"):
    """Band for 1 + accepted/drafts over the probes (server counters); below min fails."""

    min: float = Field(gt=1.0)
    max: float | None = None


class LongContextSpec(BaseModel, extra="forbid"):
    """A needle deep in a context, recalled after fillers pushed past GPU residency."""

    resident_tokens: PositiveInt  # KV tokens the arm keeps GPU-resident (capacity math)
    context_tokens: PositiveInt  # the needle request's context length
    depth: float = Field(default=0.25, ge=0, le=1)  # needle position, a fraction of the context
    overcommit: float = Field(default=1.25, gt=1)  # fillers + needle >= overcommit x resident
    filler_tokens: PositiveInt | None = None  # per filler; default context_tokens
    max_fillers: PositiveInt = 64
    answer_tokens: PositiveInt = 32


class CoherenceSpec(BaseModel, extra="forbid"):
    """Output correctness checked right after readiness (harness/coherence)."""

    probes: str  # launch/coherence/probes/<probes>.yaml, e.g. tiny-v1
    reference: str | None = None  # profile whose recorded replies this arm must reproduce
    agreement: AgreementSpec = AgreementSpec()
    garbage: GarbageSpec = GarbageSpec()
    min_answers: float = Field(default=0.75, ge=0, le=1)  # probes with `expect:` answered right
    acceptance: AcceptanceSpec | None = None
    long_context: LongContextSpec | None = None
    timeout_s: PositiveFloat = 600.0  # per probe request


class Profile(BaseModel, extra="forbid"):
    name: str
    source: Path
    description: str = ""
    extends: str | None = None
    build: str
    model: str = Field(min_length=1)
    gpus: int
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    ready_timeout_s: float
    env: dict[str, str] = {}
    serve: dict[str, Any]
    # datasets/workloads/<workload>.yaml (None only in manifests older than workload files)
    workload: str | None = None
    sweep: SweepSpec
    coherence: CoherenceSpec | None = None

    @field_validator("gpus")
    @classmethod
    def _gpus_non_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError("must be >= 0")
        return value

    @field_validator("ready_timeout_s")
    @classmethod
    def _positive_timeout(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be > 0")
        return value

    @property
    def served_model_name(self) -> str:
        name = self.serve.get("served-model-name")
        if isinstance(name, list):
            return str(name[0])
        return str(name) if name else self.model


# ---------------------------------------------------------------------------------------------
# Loading and merging


def _profile_path(name_or_path: str, relative_to: Path | None = None) -> Path:
    candidate = Path(name_or_path).expanduser()
    if candidate.suffix in (".yaml", ".yml") or "/" in name_or_path:
        if (
            not candidate.is_absolute()
            and relative_to is not None
            and (relative_to / candidate).exists()
        ):
            candidate = relative_to / candidate
        return candidate
    for folder in ([relative_to] if relative_to else []) + [PROFILES_DIR]:
        path = folder / f"{name_or_path}.yaml"
        if path.exists():
            return path
    return PROFILES_DIR / f"{name_or_path}.yaml"


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in PROFILES_DIR.glob("*.yaml")))
        raise ConfigError(f"{path}: profile not found (known profiles: {known})")
    return require_mapping(read_yaml(path, "profile"), path, "profile")


def merge(parent: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    """Recursive dict merge; a child value of None removes the key."""
    out = dict(parent)
    for key, value in child.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def _merge_profile(parent: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    out = dict(parent)
    for key, value in child.items():
        if key in DEEP_MERGED and isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        elif value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def _resolve_raw(
    path: Path, chain: tuple[Path, ...] = (), origins: dict[str, Path] | None = None
) -> dict[str, Any]:
    """The merged raw mapping; `origins` records which file set each (section.)key."""
    origins = {} if origins is None else origins
    path = path.resolve()
    if path in chain:
        cycle = " -> ".join(p.stem for p in (*chain, path))
        raise ConfigError(f"{chain[-1]}: extends: cycle {cycle}")
    raw = _read_yaml(path)
    _refuse_workload_keys(raw, path)
    parent_name = raw.get("extends")
    if parent_name is None:
        _record_origins(raw, path, origins)
        return raw
    if not isinstance(parent_name, str):
        raise ConfigError(f"{path}: extends: must be a profile name, got {parent_name!r}")
    parent_path = _profile_path(parent_name, relative_to=path.parent)
    if not parent_path.exists():
        raise ConfigError(
            f"{path}: extends: unknown parent profile {parent_name!r} (no {parent_path})"
        )
    parent = _resolve_raw(parent_path, (*chain, path), origins)
    parent.pop("description", None)
    _record_origins(raw, path, origins)
    return _merge_profile(parent, raw)


def _refuse_workload_keys(raw: dict[str, Any], path: Path) -> None:
    """What the client sends is the workload file's, never a profile's own `sweep:` key
    (`--set sweep.KEY=VALUE` may still change it for one run)."""
    sweep = raw.get("sweep")
    if not isinstance(sweep, dict):
        return
    for key in sweep:
        if key in WORKLOAD_FIELDS:
            raise ConfigError(
                f"{at_key(path, f'sweep.{key}')}: belongs in the workload file "
                f"({WORKLOADS_DIR}/<name>.yaml) the profile names with `workload:`"
            )


def _with_workload(raw: dict[str, Any], path: Path, origins: dict[str, Path]) -> None:
    """Resolve `workload:` into the sweep: the workload's fields, then the profile's `sweep:`
    block and the overrides on top (docs/workloads.md §1)."""
    name = raw.get("workload")
    source = origins.get("workload", path)
    if name is None:
        known = ", ".join(known_workloads())
        raise ConfigError(
            f"{at_key(path, 'workload')}: required key missing (a workload file of "
            f"{WORKLOADS_DIR}: {known})"
        )
    if not isinstance(name, str):
        raise ConfigError(f"{at_key(source, 'workload')}: must be a workload name, got {name!r}")
    try:
        spec = load_workload_spec(name, relative_to=source.parent)
    except ConfigError as exc:
        raise ConfigError(f"{at_key(source, 'workload')}: {exc}") from None
    own = raw.get("sweep", {})  # anything but a mapping: the Profile names the key below
    raw["sweep"] = {**spec.sweep_fields(), **own} if isinstance(own, dict) else own
    file = workload_path(name, relative_to=source.parent)
    for key in WORKLOAD_FIELDS:
        origins.setdefault(f"sweep.{key}", file)


def _record_origins(raw: dict[str, Any], path: Path, origins: dict[str, Path]) -> None:
    for key, value in raw.items():
        origins[key] = path
        if key in DEEP_MERGED and isinstance(value, dict):
            for sub in value:
                origins[f"{key}.{sub}"] = path


def _parse_override(text: str) -> tuple[list[str], Any]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {text!r}: expected KEY=VALUE, e.g. serve.max-num-seqs=64")
    try:
        parsed = safe_load(value) if value.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"override {text!r}: VALUE is not valid YAML ({yaml_problem(exc)})"
        ) from None
    return key.strip().split(".", 1), parsed


def _apply_override(raw: dict[str, Any], text: str) -> None:
    parts, value = _parse_override(text)
    if len(parts) == 2:
        section, key = parts
        if section not in DEEP_MERGED:
            raise ConfigError(
                f"override {text!r}: only serve.*, sweep.*, env.* and coherence.* take a "
                f"sub-key, not {section!r}"
            )
        block = raw.setdefault(section, {})
        if not isinstance(block, dict):
            raise ConfigError(f"override {text!r}: {section} is not a mapping")
        if value is None:
            block.pop(key, None)
        else:
            block[key] = value
    elif value is None:
        raw.pop(parts[0], None)
    else:
        raw[parts[0]] = value


def load_profile(name_or_path: str, overrides: Sequence[str] = ()) -> Profile:
    path = _profile_path(name_or_path)
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in PROFILES_DIR.glob("*.yaml")))
        raise ConfigError(f"unknown profile {name_or_path!r} (no {path}; known: {known})")
    # the file name is the profile's name, and so part of run ids and folder names: refused
    # here, before any work, rather than as a run `runs list` later calls damaged (issue 26)
    check_name(path.stem, f"{for_terminal(path)}: profile name", limit=PROFILE_NAME_MAX)
    origins: dict[str, Path] = {}
    raw = _resolve_raw(path, origins=origins)
    for text in overrides:
        _apply_override(raw, text)
    _with_workload(raw, path, origins)
    declared = raw.pop("name", None)
    if declared is not None and declared != path.stem:
        raise ConfigError(f"{path}: name: {declared!r} differs from the file name {path.stem!r}")

    def where(loc: str) -> str:
        for text in reversed(overrides):
            key = text.partition("=")[0].strip()
            if loc == key or loc.startswith(key + ".") or key.startswith(loc + "."):
                return at_key(f"{path}: override {text!r}", loc)
        parts = loc.split(".")
        for n in range(len(parts), 0, -1):
            if ".".join(parts[:n]) in origins:
                return at_key(origins[".".join(parts[:n])], loc)
        return at_key(path, loc)

    try:
        profile = Profile(name=path.stem, source=path, **raw)
    except ValidationError as exc:
        loc, msg = describe_error(exc)
        raise ConfigError(f"{where(loc)}: {msg}") from exc
    except TypeError as exc:  # e.g. a duplicate `source` key
        raise ConfigError(f"{path}: {exc}") from exc
    try:
        build = get_build(profile.build)
    except ConfigError as exc:
        raise ConfigError(f"{where('build')}: {exc}") from exc
    _check_serve(profile, build, where)
    return profile


def _check_serve(profile: Profile, build: Build, where: Callable[[str], str]) -> None:
    """Option names and kinds, then the keys inside JSON options, against the build's table."""
    table = serve_option_table(build)
    for key, value in profile.serve.items():
        problem = _check_serve_value(key, value, table)
        if problem:
            raise ConfigError(
                f"{where('serve.' + key)}: {problem} (build {build.name}, "
                f"vLLM options {build.serve_options})"
            )
    errors, _warnings = json_key_problems(profile, build)
    if errors:
        key = errors[0].split(".", 2)[1].split(":")[0]
        raise ConfigError(
            f"{where('serve.' + key)}: {errors[0].removeprefix(f'serve.{key}.')} "
            f"(build {build.name}, vLLM options {build.serve_options})"
        )


def json_key_problems(profile: Profile, build: Build | None = None) -> tuple[list[str], list[str]]:
    """(errors, warnings) for keys inside the profile's JSON-valued serve options."""
    schemas = serve_json_schemas(build or get_build(profile.build))
    errors: list[str] = []
    warnings: list[str] = []
    for key, value in profile.serve.items():
        e, w = check_json_keys(value, schemas.get(key), f"serve.{key}")
        errors += e
        warnings += w
    return errors, warnings


def _check_serve_value(key: str, value: Any, table: dict[str, dict]) -> str | None:
    if key in RESERVED_SERVE_KEYS:
        top = RESERVED_SERVE_KEYS[key]
        return (
            f"set by the harness; use the top-level `{top}:` key"
            if top
            else "not allowed in a profile"
        )
    spec = table.get(key)
    if spec is None:
        if key.replace("_", "-") in table:
            return f"unknown vLLM option; did you mean {key.replace('_', '-')!r}?"
        return "unknown vLLM option for this build"
    kind = spec["kind"]
    values = value if isinstance(value, list) and spec.get("nargs") else [value]
    for item in values:
        problem = _check_kind(kind, item)
        if problem:
            return f"{problem}, got {item!r}"
        if spec.get("choices") and str(item) not in spec["choices"]:
            return f"must be one of {', '.join(spec['choices'])}, got {item!r}"
    return None


def _check_kind(kind: str, value: Any) -> str | None:
    is_int = isinstance(value, int) and not isinstance(value, bool)
    ok = {
        "bool": isinstance(value, bool),
        "int": is_int,
        "float": is_int or isinstance(value, float),
        "json": isinstance(value, dict),
        "json_or_str": isinstance(value, dict | str),
        "int_or_str": is_int or isinstance(value, str),
        "str": isinstance(value, str | int | float) and not isinstance(value, bool),
    }.get(kind, True)
    if ok:
        return None
    return {
        "json": "must be a JSON object (a YAML mapping)",
        "bool": "must be true or false",
        "int": "must be an integer",
        "float": "must be a number",
    }.get(kind, f"must be {kind}")


def list_profiles() -> list[Profile]:
    return [load_profile(str(path)) for path in sorted(PROFILES_DIR.glob("*.yaml"))]


# ---------------------------------------------------------------------------------------------
# Rendering


def render_serve_value(value: Any) -> str:
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def render_serve_command(
    profile: Profile,
    *,
    model_path: str | None = None,
    port: int | None = None,
    executable: str = "vllm",
) -> list[str]:
    """The exact `vllm serve` argv: booleans as --flag/--no-flag, mappings as compact JSON."""
    table = serve_option_table(get_build(profile.build))
    argv = [
        executable,
        "serve",
        model_path or profile.model,
        "--host",
        profile.host,
        "--port",
        str(port if port is not None else profile.port),
    ]
    for key, value in profile.serve.items():
        flag = f"--{key}"
        if isinstance(value, bool):
            if value:
                argv.append(flag)
            elif table.get(key, {}).get("negatable", True):
                argv.append(f"--no-{key}")
            continue
        if isinstance(value, list):
            argv += [flag, *(render_serve_value(v) for v in value)]
        else:
            argv += [flag, render_serve_value(value)]
    return argv
