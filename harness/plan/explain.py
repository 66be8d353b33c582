"""Why each losing arm loses, stated with the search's own numbers (docs/plan.md §5): its best
(or closest) configuration against the winner's, what the calculator admits on each, where its
occupancy stops growing, which objective it misses first and what it moves over PCIe."""

from __future__ import annotations

from harness.plan.inputs import PlanRequest
from harness.plan.rank import (
    best_by_arm,
    capacity_figure,
    closest_by_arm,
    decisive_percentile,
    goodput_interval,
    goodput_per_gpu,
    ranked,
    series,
)
from harness.plan.search import Entry, SearchResult, qualifies

_UNIT = {"ttft": ("ttft_ms", "ms", 1000.0), "tpot": ("tpot_ms", "ms", 1000.0),
         "e2e": ("e2e_s", "s", 1.0)}  # fmt: skip


def explain(result: SearchResult) -> list[str]:
    order = ranked(result)
    if not order:
        return [_nothing_qualifies(result)]
    winner = order[0]
    best = best_by_arm(result)
    lines = []
    for arm in result.request.arms:
        if arm == winner.config.arm:
            continue
        lines.append(_why(result, arm, best.get(arm), winner))
    return lines


def _nothing_qualifies(result: SearchResult) -> str:
    r = result.request
    parts = []
    for arm in r.arms:
        near = closest_by_arm(result, arm)
        if near is not None and near.outcome is not None:
            att = near.outcome.metrics.get("slo_attainment") or 0.0
            parts.append(f"{arm} at best {att:.0%} ({_where(near)}; {_misses(r, near)})")
    return (
        f"no configuration meets {r.objectives.text()} for >= {r.min_attainment:.0%} of "
        f"requests: " + "; ".join(parts or ["none could be simulated"])
    )


def _where(entry: Entry) -> str:
    c = entry.config
    return f"c{c.concurrency}, pool {c.pool_gib:g} GiB, max-num-seqs {c.max_num_seqs}"


def _misses(request: PlanRequest, entry: Entry) -> str:
    """Each objective's decisive percentile against its limit, e.g. `TPOT p90 163 ms > 70 ms`."""
    assert entry.outcome is not None
    p = decisive_percentile(request.min_attainment)
    out = []
    for key, limit in request.objectives.given.items():
        if key not in _UNIT:
            continue
        column, unit, scale = _UNIT[key]
        value = entry.outcome.metrics.get(f"p{p}_{column}")
        if value is None:
            continue
        sign = ">" if value > limit * scale else "<="
        out.append(f"{key.upper()} p{p} {value:,.0f} {unit} {sign} {limit * scale:g} {unit}")
    return ", ".join(out) or "no latency percentile"


def _why(result: SearchResult, arm: str, best: Entry | None, winner: Entry) -> str:
    r = result.request
    g_win = goodput_per_gpu(r, winner)
    slo = f"{r.objectives.text()} for >= {r.min_attainment:.0%}"
    if best is not None:
        g = goodput_per_gpu(r, best)
        if g >= g_win * (1 - 1e-9):
            return (
                f"{arm} ties: its best configuration meeting {slo} ({_where(best)}) has the "
                f"same goodput as {winner.config.arm}'s, {g:.4f} req/s/GPU"
            )
        head = (
            f"{arm} loses: its best configuration meeting {slo} ({_where(best)}) has goodput "
            f"{g:.4f} req/s/GPU against {winner.config.arm}'s {g_win:.4f} "
            f"({(g_win - g) / g_win:.0%} less){_overlap(r, best, winner)}"
        )
        anchor = best
    else:
        anchor_or_none = closest_by_arm(result, arm)
        if anchor_or_none is None or anchor_or_none.outcome is None:
            return f"{arm} loses: no configuration of it could be simulated (all refused or pruned)"
        anchor = anchor_or_none
        att = anchor.outcome.metrics.get("slo_attainment") or 0.0 if anchor.outcome else 0.0
        head = (
            f"{arm} loses: no configuration meets {slo}; its closest ({_where(anchor)}) has "
            f"{att:.0%} of requests meeting them ({_misses(r, anchor)})"
        )
    return "; ".join([head, *_mechanism(result, arm, anchor, winner)]) + "."


def _mechanism(result: SearchResult, arm: str, anchor: Entry, winner: Entry) -> list[str]:
    r = result.request
    cfg = anchor.config
    cap = capacity_figure(r, arm, cfg.pool_gib, cfg.max_num_seqs)
    wc = winner.config
    wcap = capacity_figure(r, wc.arm, wc.pool_gib, wc.max_num_seqs)
    out = [
        (
            f"the calculator admits {cap.requests} requests of {cap.seq_len:,} tokens on it "
            f"({cap.limiter}) against {wcap.requests} on {wc.arm}"
        )
    ]
    points = series(result, cfg)
    beyond = [e for e in points if e.config.concurrency > cap.requests]
    occ = [v for e in beyond if e.outcome and (v := e.outcome.metrics.get("occupancy")) is not None]
    if occ:
        cs = [e.config.concurrency for e in beyond]
        span = f"c{min(cs)}" + (f"-c{max(cs)}" if max(cs) > min(cs) else "")
        out.append(
            f"at {span} its occupancy stays {min(occ):.1f}-{max(occ):.1f} running "
            f"(max-num-seqs {cfg.max_num_seqs}), the rest wait"
        )
    failing = [e for e in points if not qualifies(e.outcome, r)]
    above = [e for e in failing if e.config.concurrency > cfg.concurrency]
    first = above[0] if above else (failing[0] if failing else None)
    if first is not None and first.outcome is not None:
        att = first.outcome.metrics.get("slo_attainment") or 0.0
        out.append(
            f"from c{first.config.concurrency} only {att:.0%} meet the objectives "
            f"({_misses(r, first)})"
        )
        out += _transfers(first)
        same = _same_point(result, wc, first.config.concurrency)
        if same is not None and same.outcome is not None:
            m = same.outcome.metrics
            occupancy = m.get("occupancy")
            running = "" if occupancy is None else f"occupancy {occupancy:.1f}, "
            out.append(
                f"{wc.arm} at c{first.config.concurrency}: {running}{_misses(r, same)}, "
                f"{m.get('slo_attainment') or 0.0:.0%} meet them"
            )
    return out


def _overlap(request: PlanRequest, loser: Entry, winner: Entry) -> str:
    """Whether the two 80 % intervals overlap: then the simulator cannot order them."""
    low = goodput_interval(request, loser)
    high = goodput_interval(request, winner)
    if low is None or high is None or low[1] < high[0]:
        return ""
    return (
        f"; the 80 % intervals overlap ({low[0]:.4f}-{low[1]:.4f} vs {high[0]:.4f}-"
        f"{high[1]:.4f}): within the calibration's error"
    )


def _transfers(entry: Entry) -> list[str]:
    assert entry.outcome is not None
    m = entry.outcome.metrics
    done = max(entry.outcome.requests - entry.outcome.failed, 1)
    out = []
    loads = m.get("offload_load_gib")
    if loads:
        out.append(
            f"it reloads {loads / done:.1f} GiB per request from host memory "
            f"({loads:,.0f} GiB over PCIe in the point)"
        )
    if m.get("preemptions"):
        count = m["preemptions"]
        out.append(f"{count:.0f} preemption{'' if count == 1 else 's'} (re-prefills)")
    return out


def _same_point(result: SearchResult, like: object, concurrency: int) -> Entry | None:
    from harness.plan.arms import Config

    assert isinstance(like, Config)
    for entry in result.entries:
        c = entry.config
        if (c.arm, c.pool_gib, c.max_num_seqs, c.concurrency) == (
            like.arm,
            like.pool_gib,
            like.max_num_seqs,
            concurrency,
        ):
            return entry if entry.outcome is not None and entry.outcome.ok else None
    return None
