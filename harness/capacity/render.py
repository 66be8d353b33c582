"""Plain-text rendering of capacity results and of predicted-vs-measured comparisons."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from harness.capacity.deployment import GIB, Deployment
from harness.capacity.formulas import SeqResult, Variant

if TYPE_CHECKING:
    from harness.capacity.measured import RunComparison

COMPOSITION_LIMIT = 8  # print memory bars for at most this many sequence lengths


def fmt_multiplier(value: float | None) -> str:
    if value is None:
        return "-"
    return "∞" if math.isinf(value) else f"{value:.2f}x"


def _gib(nbytes: float) -> str:
    return f"{nbytes / GIB:,.1f}"


def describe_deployment(dep: Deployment) -> list[str]:
    spec = dep.model
    gpu = (
        f"{dep.gpu.upper()} ({dep.gpu_bytes / 1e9:g} GB = {dep.hbm_gib:.2f} GiB)"
        if dep.gpu != "custom"
        else f"{dep.hbm_gib:.2f} GiB GPUs"
    )
    kv_how = (
        "given"
        if dep.kv_gib_override is not None
        else (
            f"auto: {dep.gpu_memory_utilization:g} x {dep.hbm_gib:.2f} - "
            f"{dep.weights_gib_per_gpu:.2f} - {dep.runtime_reserve_gib:g}, to 0.1"
        )
    )
    host = (
        f"{dep.host_pool_gib:g} GiB"
        if dep.host_pool_gib is not None
        else "follows the minimum (clamped to 16..4096 GiB)"
    )
    lines = [
        (
            f"{spec.display_name} on {dep.gpus}x {gpu}: TP{dep.tp} DP{dep.dp}, "
            f"EP {'on' if dep.ep else 'off'}, {dep.kv_dtype} KV"
        ),
        (
            f"weights {dep.weights_gib_per_gpu:.2f} GiB/GPU; available KV {dep.kv_gib_per_gpu:.1f} "
            f"GiB/GPU ({kv_how}); max sequences/DP {dep.max_seqs:,}"
        ),
        (
            f"blocks: baseline {dep.baseline_block_bytes:,} B / {dep.baseline_block_tokens} tok, "
            f"HiSparse GPU {dep.hisparse_block_bytes:,} B / {dep.gpu_block_tokens} tok, host "
            f"{dep.host_block_bytes:,} B / {dep.host_block_tokens} tok; groups {dep.hot_groups}, "
            f"retained {dep.retained_pages}/group, other {dep.other_gpu_blocks}/request"
        ),
        f"hot rows {dep.hot_rows:,} (calculator figure)"
        + (
            f"; MTP{dep.spec_tokens} figure: ({dep.spec_tokens} + 2) x "
            f"{spec.architecture.index_topk:,} = {dep.mtp_rows:,} rows"
            if dep.mtp_rows is not None
            else ""
        ),
        (
            f"host pool/DP {host}; system RAM {dep.system_ram_gib:,.0f} GiB; indexer offload "
            f"{dep.indexer_offload_gib:,.0f} GiB; host cache "
            f"{'shared across TP' if dep.share_host else 'per TP rank'}"
        ),
    ]
    return lines


def render_table(results: Sequence[SeqResult]) -> list[str]:
    mtp = any(r.mtp is not None for r in results)
    head = f"{'seq_len':>10} {'baseline':>9} {'HiSparse':>9} {'mult':>8} {'min host/DP':>12}"
    if mtp:
        spec = results[0].deployment.spec_tokens
        head += f" | {f'MTP{spec}':>9} {'mult':>8} {'min host/DP':>12}"
    head += "  limited by"
    lines = [head]
    for r in results:
        d = r.default
        line = (
            f"{r.seq_len:>10,} {r.baseline_requests:>9,} {d.hisparse_requests:>9,} "
            f"{fmt_multiplier(d.multiplier):>8} {f'{d.min_host_pool_gib:,} GiB':>12}"
        )
        if r.mtp is not None:
            m = r.mtp
            line += (
                f" | {m.hisparse_requests:>9,} {fmt_multiplier(m.multiplier):>8} "
                f"{f'{m.min_host_pool_gib:,} GiB':>12}"
            )
        line += f"  {(r.mtp or d).limiter}"
        lines.append(line)
    return lines


def render_variant_detail(r: SeqResult, v: Variant, label: str) -> list[str]:
    dep = r.deployment
    lim = v.limits
    comp = v.composition
    gpu, cpu = comp["gpu"], comp["cpu"]
    host_limit = "unbounded" if math.isinf(lim.host_limit) else f"{int(lim.host_limit):,}"
    lines = [
        (
            f"{r.seq_len:,} tokens, {label} ({v.hot_rows:,} hot rows): per DP rank baseline "
            f"{lim.baseline_limit:,} (pool {lim.baseline_pool:,} blocks / "
            f"{lim.baseline_per_request:,} per request), HiSparse GPU "
            f"{lim.hisparse_gpu_limit:,} (pool {lim.gpu_pool:,} pages / "
            f"{lim.hisparse_gpu_per_request:,} = indexer {lim.indexer_per_request:,} + hot "
            f"{lim.hot_per_request:,} + retained {lim.resident_per_request:,} + other "
            f"{dep.other_gpu_blocks}), host {host_limit} "
            f"(pool {v.effective_host_pool_gib:,.2f} GiB), final {lim.hisparse_limit:,}"
        ),
        f"  GPU HBM per DP group at {comp['concurrency_per_dp']:,} requests "
        f"({_gib(gpu['total_bytes'])} GiB): "
        + ", ".join(f"{k} {_gib(b)}" for k, b in gpu["segments"].items())
        + (" (every request fully resident)" if comp["fully_resident"] else ""),
        f"  CPU host pools per DP group ({_gib(cpu['total_bytes'])} GiB): "
        + ", ".join(f"{k} {_gib(b)}" for k, b in cpu["segments"].items()),
    ]
    io = v.indexer_offload
    if io["coverage_requests"] is not None:
        lines.append(
            f"  indexer offload {io['effective_gib']:,.0f} GiB covers {io['coverage_requests']:,} "
            f"full histories ({io['per_request_gib']:.2f} GiB each); physical host "
            f"{v.physical_host_gib:,.0f} GiB"
        )
    return lines


def render_results(results: Sequence[SeqResult]) -> str:
    if not results:
        return ""
    dep = results[0].deployment
    lines = describe_deployment(dep)
    lines.append("")
    lines += render_table(results)
    if len(results) <= COMPOSITION_LIMIT:
        for r in results:
            lines.append("")
            lines += render_variant_detail(r, r.default, "calculator figure")
            if r.mtp is not None:
                lines += render_variant_detail(r, r.mtp, f"MTP{dep.spec_tokens}")
    else:
        lines.append(f"(memory composition omitted for {len(results)} lengths; see --json)")
    notes: list[str] = []
    for r in results:
        notes.extend(n for n in r.notes if n not in notes)
    if any(r.baseline_requests == 0 and r.default.hisparse_requests > 0 for r in results):
        notes.append("∞: HiSparse enables these sequence lengths; GPU-resident KV supports none")
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)


def render_comparison(c: RunComparison) -> str:
    dep = c.deployment
    w = c.workload
    arm = "HiSparse" if c.hisparse else "GPU-resident (no HiSparse)"
    if c.hisparse and dep.spec_tokens is not None:
        arm += f", MTP{dep.spec_tokens} hot buffers ({dep.mtp_rows:,} rows)"
    lines = [f"run {c.run.manifest.run_id} ({c.run.root}): predicted with the {arm} model"]
    lines += describe_deployment(dep)
    lines.append(
        f"workload ({w.source}): context mean {w.mean_context:,.0f}, max {w.max_context:,.0f} "
        f"tokens over {len(w.turn_contexts)} turns; sequence = context + {w.max_tokens} "
        f"generated tokens"
    )
    lines.append("")
    lines.append(
        f"{'point':<18} {'conc':>5} {'ctx mean':>9} {'ctx max':>9} {'pred@mean':>10} "
        f"{'pred@max':>9} {'fluid':>6} {'bound':>6} {'measured':>9} {'ratio':>7} {'vs bound':>9}"
    )
    for p in c.points:
        measured = "-" if p.measured is None else f"{p.measured:.2f}"
        ratio = "-" if p.ratio is None else f"{p.ratio:.2f}"
        ratio_bound = "-" if p.ratio_to_bound is None else f"{p.ratio_to_bound:.2f}"
        flag = "" if p.point.valid else "  (invalid point)"
        lines.append(
            f"{p.point.label + ' ' + p.point.point_id:<18} {p.point.parallel:>5} "
            f"{p.mean_context:>9,.0f} {p.max_context:>9,.0f} {p.predicted_at_mean:>10,} "
            f"{p.predicted_at_max:>9,} {p.fluid_at_mean:>6.2f} {p.bound:>6,} {measured:>9} "
            f"{ratio:>7} {ratio_bound:>9}"
            f"{flag}"
        )
    if not c.points:
        lines.append("(no finished points in this run)")
    lines.append(
        "ratio = measured occupancy / predicted limit at the mean context; "
        "bound = min(concurrency, that limit); fluid = that limit before flooring "
        "(pool / blocks per request), closer to a mixed-length average"
    )
    lines += [f"note: {n}" for n in c.notes]
    return "\n".join(lines)
