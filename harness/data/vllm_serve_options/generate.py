"""Dump `vllm serve` option names and value kinds from the installed vLLM's own argparser.

Run with the build's python:  python gen_opts.py > harness/data/vllm_serve_options/0.32.0.json
"""
import argparse, json, json as _json
import vllm
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser


def kind_of(t):
    if t is None or t is str:
        return "str"
    if t is int:
        return "int"
    if t is float:
        return "float"
    if t is bool:
        return "bool"
    name = getattr(t, "__name__", "")
    if name in ("parse_dataclass", "loads") or t is _json.loads:
        return "json"
    if name == "union_dict_and_str":
        return "json_or_str"
    if name.startswith("human_readable_int"):
        return "int_or_str"
    if name in ("_optional_type", "_parse_type") and t.__closure__:
        for cell in t.__closure__:
            inner = cell.cell_contents
            if callable(inner):
                return kind_of(inner)
    return "str"


p = make_arg_parser(FlexibleArgumentParser())
opts = {}
for a in p._actions:
    longs = [s[2:] for s in a.option_strings if s.startswith("--")]
    if not longs or longs[0] == "help":
        continue
    if isinstance(a, argparse.BooleanOptionalAction):
        entry = {"kind": "bool", "negatable": True}
    elif isinstance(a, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        entry = {"kind": "bool", "negatable": False}
    else:
        entry = {"kind": kind_of(a.type)}
        if a.nargs not in (None, 0):
            entry["nargs"] = str(a.nargs)
        if a.choices:
            entry["choices"] = sorted(str(c) for c in a.choices)
    opts[longs[0]] = entry
print(json.dumps({"vllm_version": vllm.__version__, "options": opts}, indent=1, sort_keys=True))
