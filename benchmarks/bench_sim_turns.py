"""Where a turn's time goes: what the published MTP3 points imply, against the simulator (issue 24).

The blog's client is a closed loop with no think time: each of the c workers always has one turn
in flight. So, by Little's law, a point's mean turn latency is c / (turns per second), and the
turn rate follows from the published throughput (total tokens per second, cached prompt tokens
included) over the workload's mean tokens per turn. With the published TPOT the latency splits
into the decode ((max_tokens - 1) x TPOT: EvalScope's TPOT is a per-request mean and every reply
has the same length, so this is the mean decode time) and the time before the first token. The
published occupancy (mean running requests) / turn rate is the time a turn spends in vLLM's
running list, so the rest of the latency is time outside it (API server, waiting queue).

The simulator is read the same way from its own metrics, and also directly (its mean TTFT, and
its engine occupancy: first schedule to last token, summed over the point, over its duration),
which checks the Little's-law reading itself. The simulated occupancy here is time-weighted (1 s
scrapes); the published one is a 30 s scrape's mean of nonzero samples, so its row carries the
scrape's phase error (docs/simulator.md §6a).

Run: .venv/bin/python benchmarks/bench_sim_turns.py [CALIBRATION] [--set PARAM=VALUE ...]
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from harness.paths import REPO_ROOT
from harness.serve.profiles import load_profile
from harness.sim.calibrate import load_targets
from harness.sim.config import load_calibration, setup_from_profile
from harness.sim.run import load_workload, simulate_points

DEFAULT = REPO_ROOT / "launch" / "calibrations" / "glm53-h200.yaml"


@dataclass(frozen=True)
class TurnBudget:
    """One point's mean turn, in seconds, from (concurrency, tokens per turn, throughput, TPOT,
    running) by Little's law."""

    rate: float  # turns per second
    latency: float
    decode: float
    before_first: float  # latency - decode: TTFT
    running: float  # time in the running list per turn
    outside: float  # latency - running: API server and waiting queue

    @classmethod
    def of(
        cls,
        parallel: int,
        tokens_per_turn: float,
        throughput: float,
        tpot_s: float,
        running: float,
        max_tokens: int,
    ) -> TurnBudget:
        rate = throughput / tokens_per_turn
        latency = parallel / rate
        decode = (max_tokens - 1) * tpot_s
        in_list = running / rate
        return cls(rate, latency, decode, latency - decode, in_list, latency - in_list)


def row(name: str, b: TurnBudget, single: bool) -> str:
    # at c1 the mean of the nonzero samples is 1 by construction: no time outside to read
    tail = f"{'-':>8} {'-':>8}" if single else f"{b.running:8.2f} {b.outside:8.2f}"
    return (
        f"  {name:24} {b.rate:6.3f} {b.latency:8.2f} {b.decode:7.2f} {b.before_first:7.2f} {tail}"
    )


def main() -> None:
    args = sys.argv[1:]
    params: dict[str, float] = {}
    while "--set" in args:  # a what-if over the calibration's values
        i = args.index("--set")
        name, value = args[i + 1].split("=")
        params[name] = float(value)
        args = args[:i] + args[i + 2 :]
    calibration = Path(args[0]) if args else DEFAULT
    cal = load_calibration(calibration)
    print(f"calibration: {calibration}" + (f" with {params}" if params else ""))
    print(
        f"  {'':24} {'turns/s':>6} {'latency':>8} {'decode':>7} {'TTFT':>7} {'running':>8} "
        f"{'outside':>8}   (seconds per turn)"
    )
    for target in load_targets():
        prof = load_profile(target.profile)
        setup = setup_from_profile(prof, cal, params or None)
        sweep = prof.sweep.model_copy(update={"scrape_interval_s": 1.0})
        results = simulate_points(setup, load_workload(None), sweep, gpus=prof.gpus)
        max_tokens = int(prof.sweep.max_tokens)
        for rec, _ in results:
            published = target.points.get(rec.label)
            m = rec.metrics
            if published is None or not m.get("request_throughput"):
                continue
            gpus = max(prof.gpus, 1)
            # the same workload on both sides: tokens per turn from the simulated point
            tokens = m["throughput_per_gpu"] * gpus / m["request_throughput"]
            pub = TurnBudget.of(
                rec.parallel,
                tokens,
                published["throughput_per_gpu"] * gpus,
                1.0 / published["interactivity"],
                published["occupancy"],
                max_tokens,
            )
            sim = TurnBudget.of(
                rec.parallel,
                tokens,
                m["throughput_per_gpu"] * gpus,
                m["mean_tpot_ms"] / 1000.0,
                m["occupancy"],
                max_tokens,
            )
            direct_latency = m["mean_ttft_ms"] / 1000.0 + sim.decode
            in_engine = m["engine_occupancy"] / sim.rate
            print(f"{target.profile} {rec.label} ({tokens:,.0f} tokens per turn)")
            single = rec.parallel == 1
            print(row("published (implied)", pub, single))
            print(row("simulated (Little)", sim, single))
            print(
                f"  {'simulated (direct)':24} {'':6} {direct_latency:8.2f} {sim.decode:7.2f} "
                f"{m['mean_ttft_ms'] / 1000.0:7.2f} {in_engine:8.2f}   engine time per turn"
            )


if __name__ == "__main__":
    main()
