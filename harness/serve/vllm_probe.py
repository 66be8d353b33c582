"""Validate one `vllm serve` argv with an installed vLLM's own parser and config classes.

Run by a BUILD's python (never imported by the harness): stdin {"argvs": [[...], ...]} (the words
after `vllm serve`), stdout a marker line then a JSON list, one {"ok", "vllm_version", "errors",
"checked"} per argv (one process: importing vLLM costs ~10 s). No model load,
no network: the argparser (the `serve` subparser, as `vllm serve` builds it), then
`validate_parsed_serve_args`, then the JSON-valued config classes built from the parsed values,
with their own strictness (vLLM's `@config` dataclasses forbid extra keys).
"""

import argparse
import dataclasses
import io
import json
import sys
from contextlib import redirect_stderr
from typing import Any

MARKER = "@@REPRO-PROBE@@"


def _parser() -> Any:
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    try:
        from vllm.entrypoints.cli.serve import ServeSubcommand
    except ImportError:  # older layouts: build the serve parser directly
        ServeSubcommand = None
    root = FlexibleArgumentParser(prog="vllm")
    if ServeSubcommand is not None:
        subparsers = root.add_subparsers(dest="subparser")
        ServeSubcommand().subparser_init(subparsers)
        return root, ["serve"]
    try:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    except ImportError:
        from vllm.entrypoints.openai.cli_args import make_arg_parser
    root.add_argument("model_tag", nargs="?")
    return make_arg_parser(root), []


def _validate_serve_args(args: argparse.Namespace) -> None:
    """What `vllm serve` runs after parsing (its module moves between releases; 0.33.0:
    vllm.entrypoints.common.cli_args), so ask the serve subcommand itself first."""
    try:
        from vllm.entrypoints.cli.serve import ServeSubcommand
    except ImportError:
        ServeSubcommand = None
    if ServeSubcommand is not None and hasattr(ServeSubcommand, "validate"):
        ServeSubcommand().validate(args)
        return
    try:
        from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args
    except ImportError:
        from vllm.entrypoints.openai.cli_args import validate_parsed_serve_args
    validate_parsed_serve_args(args)


def _field_names(cls: type) -> set[str]:
    fields = getattr(cls, "__pydantic_fields__", None)
    if fields:
        return set(fields)
    return {f.name for f in dataclasses.fields(cls)}


def _check_kv_transfer(value: Any, errors: list[str], checked: list[str]) -> None:
    from vllm.config.kv_transfer import KVTransferConfig

    config = value if isinstance(value, KVTransferConfig) else KVTransferConfig(**value)
    checked.append("KVTransferConfig")
    extra = config.kv_connector_extra_config or {}
    inner = extra.get("connectors") if config.kv_connector == "MultiConnector" else None
    for n, entry in enumerate(inner or []):
        try:
            KVTransferConfig(**entry)
            checked.append(f"MultiConnector.connectors[{n}] KVTransferConfig")
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            errors.append(f"kv-transfer-config connectors[{n}]: {exc}")
    try:
        from vllm.config.kv_transfer import hisparse_host_pool_gib
    except ImportError:
        return
    try:
        hisparse_host_pool_gib(config)
        checked.append("hisparse_host_pool_gib")
    except Exception as exc:  # noqa: BLE001
        errors.append(f"kv-transfer-config: {exc}")


def _check_speculative(value: Any, errors: list[str], checked: list[str]) -> None:
    from vllm.config.speculative import SpeculativeConfig

    # SpeculativeConfig() resolves the draft model (a hub/model load): check keys only.
    known = _field_names(SpeculativeConfig)
    unknown = sorted(set(value) - known)
    if unknown:
        errors.append(f"speculative-config: unknown key(s) {unknown} for SpeculativeConfig")
    checked.append("SpeculativeConfig keys")


def _check_attention(value: Any, errors: list[str], checked: list[str]) -> None:
    from vllm.config.attention import AttentionConfig

    if isinstance(value, dict):
        AttentionConfig(**value)
    checked.append("AttentionConfig (incl. HiSparseConfig)")


def probe(argv: list[str]) -> dict[str, Any]:
    import vllm

    errors: list[str] = []
    checked: list[str] = []
    parser, prefix = _parser()
    stderr = io.StringIO()
    try:
        with redirect_stderr(stderr):
            args = parser.parse_args(prefix + argv)
        checked.append("argparse")
    except SystemExit:
        lines = [
            line.strip()
            for line in stderr.getvalue().splitlines()
            if line.strip() and "errors.pydantic.dev" not in line and not line.startswith("usage:")
        ]
        error = " ".join(lines)[-800:] or "argparse rejected the command"
        return {"ok": False, "vllm_version": vllm.__version__, "errors": [error], "checked": []}
    try:
        _validate_serve_args(args)
        checked.append("validate_parsed_serve_args")
    except Exception as exc:  # noqa: BLE001
        errors.append(f"validate_parsed_serve_args: {exc}")
    steps = (
        ("kv_transfer_config", _check_kv_transfer),
        ("speculative_config", _check_speculative),
        ("attention_config", _check_attention),
    )
    for attr, check in steps:
        value = getattr(args, attr, None)
        if value is None:
            continue
        try:
            check(value, errors, checked)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"{attr.replace('_', '-')}: {exc}")
    return {
        "ok": not errors,
        "vllm_version": vllm.__version__,
        "errors": errors,
        "checked": checked,
    }


def main() -> None:
    request = json.loads(sys.stdin.read())
    results = [probe(list(argv)) for argv in request["argvs"]]
    sys.stdout.write("\n" + MARKER + json.dumps(results) + "\n")


if __name__ == "__main__":
    main()
