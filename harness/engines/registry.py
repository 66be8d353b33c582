"""The engines by name, and the one check of the options a sweep gives them (docs/engines.md §3).

`register` adds an engine (a plug-in registers itself the same way). Each engine declares the
`repro sweep` options it accepts; `resolve_options` picks the engine, refuses any option given
to an engine that does not declare it, and lets the engine parse its own into typed arguments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.engines.base import Engine, EngineArgs, EngineOption
from harness.errors import ConfigError
from harness.results import RunManifest

_ENGINES: dict[str, Engine] = {}
DEFAULT_CLI = "vllm"  # `repro sweep` without --engine


def register(engine: Engine) -> Engine:
    """Add `engine` under its kind; registering the same kind twice replaces it (tests). An
    option another engine declares under the same name must be declared the same way."""
    for option in engine.options:
        for other in _ENGINES.values():
            theirs = next((o for o in other.options if o.name == option.name), None)
            if other.kind != engine.kind and theirs is not None and theirs != option:
                raise ConfigError(
                    f"engine {engine.kind}: option {option.name!r} ({option.shown}) is declared "
                    f"differently by engine {other.kind}"
                )
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


# --------------------------------------------------------------------------- options


def declared_options() -> list[EngineOption]:
    """Every option a registered engine accepts, once each, in registration order."""
    seen: dict[str, EngineOption] = {}
    for engine in _ENGINES.values():
        for option in engine.options:
            seen.setdefault(option.name, option)
    return list(seen.values())


def accepting(name: str) -> list[Engine]:
    """The registered engines that accept option `name`."""
    return [e for e in _ENGINES.values() if any(o.name == name for o in e.options)]


def _described(engine: Engine) -> str:
    return f"--engine {engine.cli_name}" if engine.cli_name else f"engine {engine.kind}"


def option_help(option: EngineOption) -> str:
    """The option's help as `repro sweep --help` shows it: which engines take it, then its own."""
    if option.selects:
        return option.help
    return f"{', '.join(_described(e) for e in accepting(option.name))}: {option.help}"


def given_options(values: Mapping[str, Any]) -> dict[str, Any]:
    """The options actually given: None and an empty sequence (click's unset values) are not."""
    return {
        name: value
        for name, value in values.items()
        if value is not None and not (isinstance(value, list | tuple) and not value)
    }


def split_overrides(overrides: Sequence[str]) -> tuple[list[str], dict[str, list[str]]]:
    """`--set` items: the profile's own, and those an engine option takes by its prefix."""
    by_prefix = {o.set_prefix: o.name for o in declared_options() if o.set_prefix}
    profile_sets: list[str] = []
    engine_sets: dict[str, list[str]] = {}
    for item in overrides:
        name = next((n for prefix, n in by_prefix.items() if item.startswith(prefix)), None)
        if name is None:
            profile_sets.append(item)
        else:
            engine_sets.setdefault(name, []).append(item)
    return profile_sets, engine_sets


def resolve_options(cli_name: str, values: Mapping[str, Any]) -> tuple[Engine, EngineArgs]:
    """The engine and its typed arguments for `repro sweep --engine NAME` plus the engine
    options given (by name). An option that selects its engine (`--url`) does so when NAME is
    the default; an option no registered engine declares, or one the chosen engine does not
    accept, is a one-line ConfigError naming the option and the engine."""
    given = given_options(values)
    declared = {o.name: o for o in declared_options()}
    for name in given:
        if name not in declared:
            raise ConfigError(f"engine option {name!r}: no registered engine accepts it")
    chosen = by_cli_name(cli_name)
    if cli_name == DEFAULT_CLI:
        chosen = next(
            (e for e in _ENGINES.values() if any(o.selects and o.name in given for o in e.options)),
            chosen,
        )
    own = {o.name for o in chosen.options}
    for name in given:
        if name not in own:
            takers = " or ".join(_described(e) for e in accepting(name))
            raise ConfigError(
                f"{declared[name].shown} applies to {takers} only, not to {_described(chosen)}"
            )
    return chosen, chosen.args_from_options(given)


def options_argv(values: Mapping[str, Any]) -> list[str]:
    """The command-line words that give these engine options again (a Slurm job re-runs
    `repro sweep`); options taken from `--set` items are left to the `--set` words."""
    declared = {o.name: o for o in declared_options()}
    argv: list[str] = []
    for name, value in given_options(values).items():
        option = declared[name]
        if option.set_prefix:
            continue
        items = value if option.multiple else [value]
        argv += [f"{option.flag}={item}" for item in items]
    return argv


def for_manifest(manifest: RunManifest) -> tuple[Engine, EngineArgs]:
    """The engine of a recorded run and the arguments it ran with (older manifests included)."""
    spec = manifest.engine_record()
    if spec is None:
        raise ConfigError(f"run {manifest.run_id}: engine {manifest.engine!r} is not known")
    engine = get(spec.kind)
    return engine, engine.args_from_spec(spec)
