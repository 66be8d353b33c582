"""The engines by name. `register` adds one (a plug-in registers itself the same way)."""

from __future__ import annotations

from harness.engines.base import Engine, EngineArgs, EngineOptions
from harness.errors import ConfigError
from harness.results import RunManifest

_ENGINES: dict[str, Engine] = {}
DEFAULT_CLI = "vllm"  # `repro sweep` without --engine


def register(engine: Engine) -> Engine:
    """Add `engine` under its kind; registering the same kind twice replaces it (tests)."""
    _ENGINES[engine.kind] = engine
    return engine


def unregister(kind: str) -> None:
    _ENGINES.pop(kind, None)


def get(kind: str) -> Engine:
    try:
        return _ENGINES[kind]
    except KeyError:
        raise ConfigError(
            f"engine {kind!r}: expected one of {', '.join(sorted(_ENGINES))}"
        ) from None


def kinds() -> list[str]:
    return sorted(_ENGINES)


def cli_choices() -> list[str]:
    """The values of `repro sweep --engine`."""
    return [e.cli_name for e in _ENGINES.values() if e.cli_name and e.served]


def by_cli_name(name: str) -> Engine:
    for engine in _ENGINES.values():
        if engine.cli_name == name and engine.served:
            return engine
    raise ConfigError(f"--engine {name!r}: expected one of {', '.join(cli_choices())}")


def resolve_options(cli_name: str, options: EngineOptions) -> tuple[Engine, EngineArgs]:
    """The engine and its typed arguments for `repro sweep --engine NAME` plus its options:
    `--url` with the default engine attaches (engine url)."""
    chosen = by_cli_name(cli_name)
    if options.url and cli_name == DEFAULT_CLI:
        chosen = get("url")
    return chosen, chosen.args_from_options(options)


def for_manifest(manifest: RunManifest) -> tuple[Engine, EngineArgs]:
    """The engine of a recorded run and the arguments it ran with (older manifests included)."""
    spec = manifest.engine_record()
    if spec is None:
        raise ConfigError(f"run {manifest.run_id}: engine {manifest.engine!r} is not known")
    engine = get(spec.kind)
    return engine, engine.args_from_spec(spec)
