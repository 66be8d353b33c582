"""Engines as plug-ins: the interface (`base`), the registry, and the four built-in engines.

`vllm` (a pinned build, launched), `url` (attached), `sim-http` (the simulated server,
launched) and `sim` (the simulator in process). See docs/engines.md to add one.
"""

from __future__ import annotations

from harness.engines.base import (
    Engine,
    EngineArgs,
    EngineOption,
    Server,
    StartContext,
)
from harness.engines.registry import (
    DEFAULT_CLI,
    accepting,
    by_cli_name,
    cli_choices,
    declared_options,
    for_manifest,
    get,
    given_options,
    kinds,
    option_help,
    options_argv,
    register,
    resolve_options,
    split_overrides,
    unregister,
)
from harness.engines.sim import SimEngine
from harness.engines.sim_http import SimHttpEngine
from harness.engines.url import UrlEngine
from harness.engines.vllm import VllmEngine

for _engine in (VllmEngine(), UrlEngine(), SimHttpEngine(), SimEngine()):
    register(_engine)

__all__ = [
    "DEFAULT_CLI",
    "Engine",
    "EngineArgs",
    "EngineOption",
    "Server",
    "StartContext",
    "accepting",
    "by_cli_name",
    "cli_choices",
    "declared_options",
    "for_manifest",
    "get",
    "given_options",
    "kinds",
    "option_help",
    "options_argv",
    "register",
    "resolve_options",
    "split_overrides",
    "unregister",
]
