"""The plan as a typed, versioned record (`--format json`) and as the text table."""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict

from harness import __version__
from harness.plan.arms import serve_command
from harness.plan.explain import explain
from harness.plan.rank import (
    PERCENTILES,
    capacity_figure,
    decisive_percentile,
    goodput_interval,
    goodput_per_gpu,
    ranked,
)
from harness.plan.search import Entry, SearchResult

SCHEMA = "repro.plan/1"


class RankedConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rank: int
    config: dict[str, Any]
    goodput_rps_per_gpu: float
    goodput_rps_per_gpu_interval80: list[float] | None
    output_tok_s_per_gpu: float | None
    slo_attainment: float
    percentiles: dict[str, float | None]  # p50/p90/p99 of ttft_ms, tpot_ms, e2e_s
    occupancy: float | None
    interval80: dict[str, list[float]]  # the simulator's: occupancy, interactivity, tput/GPU
    capacity: dict[str, Any]  # repro capacity: requests, limiter, seq_len
    source: str


class ConfigOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid")

    config: dict[str, Any]
    source: str  # simulated | cached | shared | pruned | refused
    goodput_rps_per_gpu: float | None
    slo_attainment: float | None
    note: str | None


class PlanRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: str = SCHEMA
    harness_version: str = __version__
    created_at: float
    request: dict[str, Any]
    counts: dict[str, int]
    seconds: float
    ranked: list[RankedConfig]
    best_serve_command: str | None
    why: list[str]
    configurations: list[ConfigOutcome]


def _ranked(result: SearchResult, entry: Entry, rank: int) -> RankedConfig:
    r = result.request
    o = entry.outcome
    assert o is not None
    c = entry.config
    pct = {f"p{p}_{m}": o.metrics.get(f"p{p}_{m}") for m in ("ttft_ms", "tpot_ms", "e2e_s")
           for p in PERCENTILES}  # fmt: skip
    return RankedConfig(
        rank=rank,
        config=c.to_json(),
        goodput_rps_per_gpu=goodput_per_gpu(r, entry),
        goodput_rps_per_gpu_interval80=goodput_interval(r, entry),
        output_tok_s_per_gpu=o.metrics.get("output_throughput_per_gpu"),
        slo_attainment=o.metrics.get("slo_attainment") or 0.0,
        percentiles=pct,
        occupancy=o.metrics.get("occupancy"),
        interval80=o.interval80,
        capacity=capacity_figure(r, c.arm, c.pool_gib, c.max_num_seqs).to_json(),
        source=entry.source,
    )


def plan_record(result: SearchResult) -> PlanRecord:
    r = result.request
    order = ranked(result)
    top = [_ranked(result, e, i + 1) for i, e in enumerate(order[: r.top])]
    best = serve_command(order[0].config, model_id=r.model_id, tp=r.tp) if order else None
    return PlanRecord(
        created_at=time.time(),
        request={
            "model": r.model,
            "gpu": r.gpu,
            "tp": r.tp,
            "gpus": r.gpus,
            "workload": r.traffic.to_json(),
            "objectives": r.objectives.text(),
            "min_attainment": r.min_attainment,
            "grid": {
                "arms": list(r.arms),
                "host_pool_gib": list(r.pools_gib),
                "max_num_seqs": list(r.max_num_seqs),
                "concurrency": list(r.concurrency),
            },
            "calibration": str(r.calibration) if r.calibration else None,
            "notes": list(r.notes),
        },
        counts=result.counts,
        seconds=result.seconds,
        ranked=top,
        best_serve_command=best,
        why=explain(result),
        configurations=[
            ConfigOutcome(
                config=e.config.to_json(),
                source=e.source,
                goodput_rps_per_gpu=None if e.goodput_rps is None else e.goodput_rps / r.gpus,
                slo_attainment=e.outcome.metrics.get("slo_attainment") if e.outcome else None,
                note=e.note or (e.outcome.reason if e.outcome else None),
            )
            for e in result.entries
        ],
    )


def _f(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _span(pair: list[float] | None, spec: str) -> str:
    return "" if not pair else f" [{format(pair[0], spec)}-{format(pair[1], spec)}]"


def render_text(record: PlanRecord) -> str:
    q = record.request
    w = q["workload"]
    p = decisive_percentile(q["min_attainment"])
    head = (
        f"repro plan: {q['model']} on {q['tp']}x{q['gpu'].upper()} (TP{q['tp']}), "
        f"{w['turns']} turns, {w['context']:,}-token context + {w['turn_tokens']} per turn, "
        f"{w['output_tokens']}-token replies (longest {w['longest_tokens']:,}), "
        f"think time {w['think_time']['kind']}"
    )
    goal = (
        f"objectives {q['objectives']} for >= {q['min_attainment']:.0%} of requests; "
        f"calibration {q['calibration'] or 'none (roofline defaults)'}"
    )
    lines = [head, goal, _counts_line(record), ""]
    if not record.ranked:
        lines.append("no configuration meets the objectives")
    else:
        lines.append(
            f"{'#':>5} {'arm':14} {'pool GiB':>11} {'mns':>4} {'c':>3}  "
            f"{'goodput/GPU [80%]':24} {'out tok/s/GPU':>13} {'attain':>6} "
            f"{'TTFT p50/p' + str(p) + ' s':>16} {'TPOT p50/p' + str(p) + ' ms':>17} "
            f"{'running [80%]':18} {'capacity':>8}"
        )
        for group in _identical_runs(record.ranked):
            lines.append(_row(group, p))
        lines += [
            "",
            (
                "goodput = requests meeting every objective / s / GPU; [80%] = the "
                "calibration's prediction interval (goodput: its throughput interval, "
                "attainment held); capacity = `repro capacity` requests at the longest turn; "
                "pools listed together predict exactly the same"
            ),
        ]
    if record.best_serve_command:
        lines += ["", "serve command of the best:", f"  {record.best_serve_command}"]
    if record.why:
        lines += ["", "why:"] + [f"  - {line}" for line in record.why]
    return "\n".join(lines)


def _counts_line(record: PlanRecord) -> str:
    n = record.counts
    return (
        f"{n['configurations']} configurations on {n['servers']} simulated servers in "
        f"{record.seconds:.1f} s: {n['simulated_sweeps']} sweeps simulated, "
        f"{n['cached_sweeps']} from the cache (c1 probes included); {n['shared']} "
        f"configurations shared a sweep (max-num-seqs >= every c), {n['pruned']} pruned by "
        f"bounds, {n['refused']} refused by the engine; {n['qualifying']} meet the objectives"
    )


def _identical_runs(rows: list[RankedConfig]) -> list[list[RankedConfig]]:
    """Consecutive rows that predict exactly the same, differing only in the host pool (a pool
    the point never fills), shown as one row listing the pools."""

    def same(a: RankedConfig, b: RankedConfig) -> bool:
        skip = {"rank", "config", "source"}
        pool_free = {k: v for k, v in a.config.items() if k != "host_pool_gib"}
        other = {k: v for k, v in b.config.items() if k != "host_pool_gib"}
        return pool_free == other and a.model_dump(exclude=skip) == b.model_dump(exclude=skip)

    groups: list[list[RankedConfig]] = []
    for row in rows:
        if groups and same(groups[-1][0], row):
            groups[-1].append(row)
        else:
            groups.append([row])
    return groups


def _row(group: list[RankedConfig], p: int) -> str:
    row = group[0]
    c = row.config
    ranks = f"{row.rank}" if len(group) == 1 else f"{row.rank}-{group[-1].rank}"
    pools = ",".join(f"{r.config['host_pool_gib']:g}" for r in group)
    pct = row.percentiles
    ttft = f"{_f(_s(pct.get('p50_ttft_ms')), '.2f')}/{_f(_s(pct.get(f'p{p}_ttft_ms')), '.2f')}"
    tpot = f"{_f(pct.get('p50_tpot_ms'), '.1f')}/{_f(pct.get(f'p{p}_tpot_ms'), '.1f')}"
    goodput = f"{row.goodput_rps_per_gpu:.4f}{_span(row.goodput_rps_per_gpu_interval80, '.4f')}"
    running = f"{_f(row.occupancy, '.1f')}{_span(row.interval80.get('occupancy'), '.1f')}"
    return (
        f"{ranks:>5} {c['arm']:14} {pools:>11} {c['max_num_seqs']:>4} "
        f"{c['concurrency']:>3}  {goodput:24} {_f(row.output_tok_s_per_gpu, '13.1f')} "
        f"{row.slo_attainment:>6.0%} {ttft:>16} {tpot:>17} {running:18} "
        f"{row.capacity['requests']:>8}"
    )


def _s(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000.0
