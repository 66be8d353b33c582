"""Where the simulated time goes, per point (issue 24: what differs at c8).

For each arm and point: the engine's steps by kind (decode only, decode + prefill chunk, prefill
only, idle), the share of busy time in each cost term, and the per-request TPOT split into the
decode work of its steps, the surplus that other requests' prefill chunks add to those steps
(chunked-prefill interference) and the time it was not scheduled; TTFT and its share of latency.

Run: PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_sim_breakdown.py [ARM ...] [--points c1,c8]
[--timeline] [--set PARAM=VALUE ...]
(default: the two MTP3 arms, c1/c8/c16; the shipped calibration; --set overrides a parameter)
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from harness.paths import REPO_ROOT
from harness.serve.profiles import load_profile
from harness.sim.client import PointClient
from harness.sim.config import SimSetup, load_calibration, setup_from_profile
from harness.sim.cost import Roofline, StepStats, step_stats
from harness.sim.engine import Engine, PointResult
from harness.sim.run import load_workload, simulate_points
from harness.sim.scheduler import Scheduled

CALIBRATION = REPO_ROOT / "launch" / "calibrations" / "glm53-h200.yaml"
TIMELINE = False  # --timeline: busy time, decoders and prefill tokens per 10 s
TERMS = ("overhead", "dense", "attention", "moe", "indexer", "allreduce", "head", "draft", "pcie")


@dataclass
class PointLog:
    steps: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    terms: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    busy: float = 0.0
    start: float = 0.0
    end: float = 0.0
    # rid -> [decode steps, their time, of which prefill surplus, decode batch sizes summed,
    # the surplus of steps that carried a whole-history prefill]
    per_req: dict[int, list[float]] = field(default_factory=lambda: defaultdict(lambda: [0.0] * 5))
    finished: list[Any] = field(default_factory=list)
    timeline: list[tuple[float, float, int, int]] = field(default_factory=list)  # end, s, dec, pre


def terms(rf: Roofline, s: StepStats) -> dict[str, float]:
    """The step's time by cost term (the roofline's own formulas, per rank)."""
    out = dict.fromkeys(TERMS, 0.0)
    out["overhead"] = rf.step_overhead_ms / 1000.0
    tokens = s.decode_tokens + s.prefill_tokens
    if tokens:
        rows = s.attn_rows + s.prefill_attn_rows
        keys = s.indexer_rows + s.prefill_indexer_keys
        pairs = s.indexer_pairs + s.prefill_indexer_rows
        dense, attn, moe, indexer = rf._layers(tokens, rows, keys, pairs)
        out["dense"] = rf.num_layers * dense
        out["attention"] = rf.num_layers * attn
        out["moe"] = rf.moe_layers * moe
        out["indexer"] = rf.indexer_layers * indexer
        out["allreduce"] = rf.num_layers * 2 * rf._allreduce(tokens)
        out["head"] = rf._head(s.decode_tokens + (1 if s.prefill_tokens else 0))
    out["draft"] = rf.draft_time(s)
    # the copies' share is what they add to the step: misses run beside the compute and only
    # their exposed part counts (harness/sim/cost.py `overlapped`), a prefill's staging whole
    out["pcie"] = rf.step_time(s) - sum(out.values())
    return out


def instrument(engine: Engine, logs: list[PointLog]) -> None:
    rf = engine.cost
    assert isinstance(rf, Roofline)
    sched = engine.scheduler
    topk, width = engine.topk, sched.mtp.verify_width
    missing = engine.residency.missing_fraction
    update, run_point = sched.update, engine.run_point

    def logged_update(batch: list[Scheduled], end: float) -> list[Any]:
        log = logs[-1]
        full = step_stats(batch, topk=topk, verify_width=width, missing=missing)
        t = rf.step_time(full)
        decode = [b for b in batch if not b.prefill]
        prefill = len(batch) - len(decode)
        kind = "decode" if not prefill else ("mixed" if decode else "prefill")
        log.steps[kind].append(t)
        log.timeline.append((end, t, len(decode), full.prefill_tokens))
        log.busy += t
        for name, value in terms(rf, full).items():
            log.terms[name] += value
        alone = rf.step_time(step_stats(decode, topk=topk, verify_width=width, missing=missing))
        # a first turn (or a recompute) prefills its whole history; later turns only their tail
        long_prefill = any(b.prefill and b.req.cached_at_start == 0 for b in batch)
        for b in decode:
            row = log.per_req[b.req.rid]
            row[0] += 1
            row[1] += t
            row[2] += t - alone
            row[3] += len(decode)
            row[4] += (t - alone) if long_prefill else 0.0
        done = update(batch, end)
        log.finished += done
        return done

    def logged_point(
        client: PointClient, scrape_interval: float, max_steps: int = 50_000_000
    ) -> PointResult:
        logs.append(PointLog(start=engine.now))
        res = run_point(client, scrape_interval, max_steps)
        logs[-1].end = engine.now
        return res

    sched.update = logged_update  # type: ignore[method-assign]  # benchmark instrumentation
    engine.run_point = logged_point  # type: ignore[method-assign]  # benchmark instrumentation


def run_arm(arm: str, labels: set[str], params: dict[str, float]) -> None:
    prof = load_profile(arm)
    setup = setup_from_profile(prof, load_calibration(CALIBRATION), params or None)
    logs: list[PointLog] = []
    build = SimSetup.build

    def instrumented(self: SimSetup) -> Engine:
        engine = build(self)
        instrument(engine, logs)
        return engine

    SimSetup.build = instrumented  # type: ignore[method-assign]  # benchmark instrumentation
    try:
        results = simulate_points(setup, load_workload(None), prof.sweep, gpus=prof.gpus)
    finally:
        SimSetup.build = build  # type: ignore[method-assign]  # restored
    for (record, _), log in zip(results, logs, strict=True):
        if record.label not in labels:
            continue
        report(arm, record, log)


def report(arm: str, record: Any, log: PointLog) -> None:
    m = record.metrics
    span = log.end - log.start
    print(
        f"\n{arm} {record.label}: occupancy {m['occupancy']:.1f}, {m['interactivity']:.1f} "
        f"tok/s/user, {m['throughput_per_gpu']:.0f} tok/s/GPU, point {span:.0f} s, "
        f"idle {100 * (1 - log.busy / span):.1f} %, GPU stalled by copy submissions "
        f"{record.fidelity.get('copy_submit_stall_s', 0.0):.1f} s"
    )
    for kind in ("decode", "mixed", "prefill"):
        times = log.steps.get(kind, [])
        if times:
            print(
                f"  {kind:8} steps {len(times):6d}  {100 * sum(times) / log.busy:5.1f} % of busy "
                f"time, mean {1000 * sum(times) / len(times):7.1f} ms"
            )
    shares = "  ".join(f"{k} {100 * v / log.busy:.1f}" for k, v in log.terms.items())
    print(f"  cost terms, % of busy time: {shares}")
    tpot, work, surplus, gap, batch, ttft, lat, first_ttft, whole = ([] for _ in range(9))
    for req in log.finished:
        if req.first_token_at is None or req.finished_at is None or req.out < 2:
            continue
        steps, t, extra, bsum, long_extra = log.per_req[req.rid]
        decode_span = req.finished_at - req.first_token_at
        tpot.append(decode_span / (req.out - 1))
        work.append((t - extra) / (req.out - 1))
        surplus.append(extra / (req.out - 1))
        whole.append(long_extra / (req.out - 1))
        gap.append((decode_span - t) / (req.out - 1))
        batch.append(bsum / steps if steps else 0.0)
        ttft.append(req.first_token_at - req.arrival)
        lat.append(req.finished_at - req.arrival)
        if req.turn == 1:
            first_ttft.append(req.first_token_at - req.arrival)

    def avg(xs: list[float]) -> float:
        return sum(xs) / len(xs) if xs else 0.0

    print(
        f"  TPOT {1000 * avg(tpot):.2f} ms = decode work {1000 * avg(work):.2f} + other requests' "
        f"prefill chunks {1000 * avg(surplus):.2f} (whole-history prefills {1000 * avg(whole):.2f})"
        f" + not scheduled {1000 * avg(gap):.2f}; "
        f"mean decode batch {avg(batch):.1f}"
    )
    ranked = sorted(tpot)
    if ranked:
        median = ranked[len(ranked) // 2]
        heavy = sum(t for t in ranked if t > 2 * median)
        print(
            f"  TPOT per request: median {1000 * median:.1f} ms, p90 "
            f"{1000 * ranked[int(0.9 * len(ranked))]:.1f}, max {1000 * ranked[-1]:.1f}; requests "
            f"over twice the median carry {100 * heavy / sum(ranked):.1f} % of the mean"
        )
    if TIMELINE:
        width = 10.0
        bins: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        for end, t, dec, pre in log.timeline:
            row = bins[int((end - log.start) // width)]
            row[0] += t
            row[1] += dec * t
            row[2] += pre
        print("  timeline (10 s bins): busy s, mean decoders, prefill ktokens")
        print(
            "   "
            + " ".join(
                f"{b[0]:.0f}/{b[1] / max(b[0], 1e-9):.1f}/{b[2] / 1000:.0f}"
                for _, b in sorted(bins.items())
            )
        )
    print(
        f"  TTFT mean {avg(ttft):.2f} s (first turns {avg(first_ttft):.2f} s), "
        f"{100 * sum(ttft) / sum(lat):.1f} % of latency; {len(tpot)} requests"
    )


def main() -> None:
    global TIMELINE
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "arms", nargs="*", default=["hisparse384", "offload512"], help="serve profiles"
    )
    parser.add_argument("--points", default="c1,c8,c16", help="point labels, comma-separated")
    parser.add_argument("--timeline", action="store_true", help="busy time per 10 s")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PARAM=VALUE",
        help="a parameter over the calibration's (what-if; repeatable)",
    )
    args = parser.parse_args()
    TIMELINE = args.timeline
    params: dict[str, float] = {}
    for item in args.set:
        name, sep, value = item.partition("=")
        try:
            params[name] = float(value)
        except ValueError:
            parser.error(f"--set {item!r}: expected PARAM=NUMBER")
        if not sep:
            parser.error(f"--set {item!r}: expected PARAM=NUMBER")
    for arm in args.arms:
        if arm.startswith("c") and arm[1:].replace(",c", "").isdigit():
            parser.error(f"{arm!r} is a point list, not a profile: use --points {arm}")
        run_arm(arm, set(args.points.split(",")), params)


if __name__ == "__main__":
    main()
