"""`repro capacity`: turn the command's options into results, text, JSON and charts."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.capacity.deployment import (
    DEFAULT_INDEXER_OFFLOAD_GIB,
    DEFAULT_SYSTEM_RAM_GIB,
    BlockOverrides,
    make_deployment,
)
from harness.capacity.formulas import DEFAULT_SEQ_LEN, evaluate_many, parse_seq_range
from harness.capacity.render import render_comparison, render_results
from harness.errors import ConfigError

# Options that describe the deployment; with --run the run's profile supplies them instead.
_TOPOLOGY = ("tp", "dp", "ep", "kv_dtype", "max_seqs", "hot_rows", "spec_tokens", "host_pool_gib")
_ADVANCED = tuple(BlockOverrides.__annotations__)


def _advanced(options: dict[str, Any]) -> BlockOverrides:
    """The block-size and pool-shape options (None where not given: the model file's value)."""
    return BlockOverrides(
        baseline_block_bytes=options.get("baseline_block_bytes"),
        hisparse_block_bytes=options.get("hisparse_block_bytes"),
        host_block_bytes=options.get("host_block_bytes"),
        baseline_block_tokens=options.get("baseline_block_tokens"),
        gpu_block_tokens=options.get("gpu_block_tokens"),
        host_block_tokens=options.get("host_block_tokens"),
        groups=options.get("groups"),
        retained_pages=options.get("retained_pages"),
        other_gpu_blocks=options.get("other_gpu_blocks"),
    )


def _seq_lens(options: dict[str, Any]) -> list[int]:
    lens = list(options.get("seq_lens") or ())
    if options.get("seq_range"):
        lens += parse_seq_range(str(options["seq_range"]))
    for value in lens:
        if value < 1:
            raise ConfigError(f"--seq-len {value}: must be >= 1")
    return lens or [DEFAULT_SEQ_LEN]


def run_capacity(options: dict[str, Any], echo: Callable[[str], None] = print) -> str:
    """The command's stdout text; side messages (files written) go to `echo`."""
    if options.get("gpu") and options.get("hbm_gib") is not None:
        raise ConfigError("give either --gpu or --hbm-gib, not both")
    if options.get("run_dir") is not None:
        return _run_comparison(options, echo)
    dep = make_deployment(
        options.get("model") or "glm-5.3",
        gpu=(options.get("gpu") or "h200"),
        hbm_gib=options.get("hbm_gib"),
        tp=_or(options.get("tp"), 8),
        dp=_or(options.get("dp"), 1),
        ep=True if options.get("ep") is None else bool(options["ep"]),
        kv_dtype=options.get("kv_dtype") or "fp8",
        max_seqs=options.get("max_seqs"),
        hot_rows=options.get("hot_rows"),
        spec_tokens=options.get("spec_tokens"),
        host_pool_gib=options.get("host_pool_gib"),
        indexer_offload_gib=_or(options.get("indexer_offload_gib"), DEFAULT_INDEXER_OFFLOAD_GIB),
        system_ram_gib=_or(options.get("system_ram_gib"), DEFAULT_SYSTEM_RAM_GIB),
        share_host=bool(options.get("share_host", True)),
        kv_gib_per_gpu=options.get("kv_gib_per_gpu"),
        **_advanced(options),
    )
    concurrency = options.get("bar_concurrency")
    if concurrency is not None and concurrency < 0:
        raise ConfigError(f"--bar-concurrency {concurrency}: must be >= 0")
    results = evaluate_many(dep, _seq_lens(options), concurrency=concurrency)
    if options.get("plot"):
        # Imported here: plotly and the run records stay off the calculator's quick path.
        from harness.capacity.figures import capacity_figures, write_html

        path = write_html(
            capacity_figures(dep, results=results),
            Path(options["plot"]),
            title=f"repro capacity: {dep.model.display_name}",
        )
        echo(f"wrote {path}")
    if options.get("as_json"):
        return json.dumps([r.to_json() for r in results], indent=2)
    return render_results(results)


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def _run_comparison(options: dict[str, Any], echo: Callable[[str], None]) -> str:
    given = [k for k in (*_TOPOLOGY, *_ADVANCED, "seq_range") if options.get(k) is not None]
    if options.get("seq_lens"):
        given.append("seq_lens")
    if given:
        names = ", ".join("--" + k.replace("_", "-") for k in given)
        raise ConfigError(
            f"--run takes the topology and workload from the run's profile; drop {names} "
            f"(only --model, --gpu/--hbm-gib, --kv-gib-per-gpu, --system-ram-gib, "
            f"--indexer-offload-gib, --json and --plot apply)"
        )
    from harness.capacity.measured import compare_run  # the run records (pydantic) load here

    comparison = compare_run(
        Path(options["run_dir"]),
        model=options.get("model"),
        gpu=options.get("gpu"),
        hbm_gib=options.get("hbm_gib"),
        kv_gib_per_gpu=options.get("kv_gib_per_gpu"),
        system_ram_gib=options.get("system_ram_gib"),
        indexer_offload_gib=options.get("indexer_offload_gib"),
    )
    if options.get("plot"):
        from harness.capacity.figures import capacity_figures, write_html

        path = write_html(
            capacity_figures(run=comparison),
            Path(options["plot"]),
            title=f"repro capacity: run {comparison.run.manifest.run_id}",
        )
        echo(f"wrote {path}")
    if options.get("as_json"):
        return json.dumps(comparison.to_json(), indent=2)
    return render_comparison(comparison)
