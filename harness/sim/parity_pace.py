"""Replay a measured CPU run's own pace (docs/simulator.md §6c).

On a shared machine the real server's speed follows the load of the moment: the same sweep ran
3-7 times faster when other work stopped. A step cost fitted once on a base sweep then predicts
another sweep's occupancy with the base sweep's pace, and the error measures the load, not the
scheduler model. So each measured point is replayed at its own pace, taken from that point's
server histograms (sums over the point's window, `PointDeltas`):

* the base fit's step cost keeps its shape (fixed + per decoding request + per prefill token)
  but is scaled per point: the decode part (`decode_scale`) until the simulated requests spend
  as long per output token after the first as the measured ones did (vLLM's decode time over
  its tokens: the server's TPOT), the prefill part (`prefill_scale`) until they spend as long
  from their first schedule to their first token (vLLM's prefill time per request);
* the time a request spends outside the engine's queues (HTTP, chat template, tokenising,
  streaming, the client's turn hand-off) is the point's own: the client's mean latency minus
  the server's queue and inference time per request.

The point's requests are replayed with the prompt lengths the server counted for them (its
request table): a reply re-sent as text is re-tokenised with its template, so a conversation's
turn-4 prompt came to 908-969 tokens where the templated counts with a mean excess give 945 for
all, and with 64-token replies the 1,024-token (8-block) boundary lies inside that range.

Both are speeds, not outcomes: what is left to predict is how long requests wait for the pool
(queue time, preemptions) and so how many run at once (the gauge). The scales are found by a
fixed-point iteration (the simulated times are nearly proportional to them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import pairwise
from pathlib import Path

from harness.analysis.request_table import TABLE_NAME, read_table
from harness.errors import RunError
from harness.results import RunLayout, load_run
from harness.sim.client import Workload
from harness.sim.parity import CpuCost, PointDeltas, RequestTimes, point_deltas

MAX_ITERATIONS = 12
TOLERANCE = 0.01  # relative change of every scale in the last iteration
SCALE_BOUNDS = (1e-3, 1e3)


@dataclass(frozen=True)
class Target:
    """What one measured point's server histograms say about its pace."""

    tpot_s: float  # decode seconds per output token after the first
    prefill_s: float  # seconds from first schedule to first token, per request
    overhead_s: float  # out-of-engine seconds per request

    @classmethod
    def of(cls, d: PointDeltas) -> Target:
        return cls(d.tpot_s, d.prefill_s / d.requests, max(d.overhead_s, 0.0))


@dataclass(frozen=True)
class Pace:
    """One point's step-cost scales and its out-of-engine time."""

    decode_scale: float
    prefill_scale: float
    overhead_s: float

    def cost(self, base: CpuCost) -> CpuCost:
        return replace(
            base,
            step_s=base.step_s * self.decode_scale,
            per_seq_s=base.per_seq_s * self.decode_scale,
            per_prefill_token_s=base.per_prefill_token_s * self.prefill_scale,
            overhead_s=self.overhead_s,
            overhead_per_parallel_s=0.0,
        )


def sim_tpot(t: RequestTimes) -> float:
    return t.decode_s / max(t.decode_tokens, 1)


def sim_prefill(t: RequestTimes) -> float:
    return t.prefill_s / max(t.requests, 1)


def measured_targets(real_run: Path | str) -> dict[str, Target]:
    """Per valid point of a real run, its pace (point id -> Target)."""
    run = load_run(real_run)
    return {p.point_id: Target.of(point_deltas(run, p)) for p in run.valid_points()}


def _clamp(x: float) -> float:
    lo, hi = SCALE_BOUNDS
    return min(max(x, lo), hi)


def next_paces(
    paces: dict[str, Pace], targets: dict[str, Target], times: dict[str, RequestTimes]
) -> tuple[dict[str, Pace], float]:
    """One fixed-point step: each scale times measured / simulated; (paces, largest change)."""
    out, worst = {}, 0.0
    for pid, pace in paces.items():
        target, t = targets[pid], times[pid]
        if t.requests <= 0:
            raise RunError(f"point {pid}: the simulated point finished no request")
        kd = _clamp(pace.decode_scale * target.tpot_s / max(sim_tpot(t), 1e-12))
        kp = _clamp(pace.prefill_scale * target.prefill_s / max(sim_prefill(t), 1e-12))
        worst = max(worst, abs(kd / pace.decode_scale - 1), abs(kp / pace.prefill_scale - 1))
        out[pid] = Pace(kd, kp, pace.overhead_s)
    return out, worst


def initial_paces(targets: dict[str, Target]) -> dict[str, Pace]:
    return {pid: Pace(1.0, 1.0, t.overhead_s) for pid, t in targets.items()}


def solve_paces(
    targets: dict[str, Target],
    simulate: Callable[[dict[str, Pace]], dict[str, RequestTimes]],
    max_iterations: int = MAX_ITERATIONS,
    tolerance: float = TOLERANCE,
) -> tuple[dict[str, Pace], float]:
    """Iterate `next_paces` from scales of 1 until no scale moves by `tolerance` (or
    `max_iterations`): (the paces, the last relative change). `simulate` runs the whole
    sweep with the given paces and returns each point's simulated request times."""
    paces, change = initial_paces(targets), float("inf")
    for _ in range(max_iterations):
        paces, change = next_paces(paces, targets, simulate(paces))
        if change < tolerance:
            break
    return paces, change


def point_workload(point_dir: Path, workload: Workload, reply: int) -> Workload:
    """`workload` with each conversation the point replayed whole given the prompt lengths the
    server counted for its turns (the point's request table; the later turns stay as they
    were): new tokens of turn t = prompt t - prompt t-1 - the fixed reply."""
    frame = read_table(point_dir / TABLE_NAME)
    prompts: dict[int, dict[int, int]] = {}
    rows = frame[["conversation", "turn", "prompt_tokens", "success"]].itertuples(index=False)
    for conv, turn, prompt, ok in rows:
        if ok and int(conv) >= 0 and prompt and prompt > 0:
            prompts.setdefault(int(conv), {}).setdefault(int(turn), int(prompt))
    turns = list(workload.turns)
    for conv, by_turn in prompts.items():
        seen = [by_turn[t] for t in range(1, len(by_turn) + 1) if t in by_turn]
        if conv >= len(turns) or len(seen) != len(by_turn) or len(seen) > len(turns[conv]):
            continue  # not a dataset conversation, or a turn missing
        new = (seen[0], *(b - a - reply for a, b in pairwise(seen)))
        if min(new) >= 1:
            turns[conv] = new + turns[conv][len(new) :]
    return Workload(tuple(turns), f"{workload.source} (prompts as served in {point_dir.name})")


def recorded_workloads(real_run: Path | str, workload: Workload) -> dict[str, Workload]:
    """Per valid point of a real run, `point_workload` (point id -> Workload)."""
    run = load_run(real_run)
    layout, reply = RunLayout(run.root), int(run.manifest.sweep["max_tokens"])
    return {
        p.point_id: point_workload(layout.point_dir(p.point_id), workload, reply)
        for p in run.valid_points()
    }
