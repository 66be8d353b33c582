"""The search: every configuration of the grid gets an outcome, simulated, read from the cache,
shared with an identical simulation, or pruned by a bound that cannot change the answer.

A *server* is an arm, a host pool and a max-num-seqs; it runs the grid's concurrencies in
ascending order as one simulated sweep (evaluate.py), so one simulation answers a whole row of
the grid.

Sharing (exact): `max-num-seqs` only caps the scheduler's running list, which never holds more
requests than a point's workers have in flight, and the pools are sized without it
(docs/simulator.md §2-§3). Every `max-num-seqs >= the largest concurrency` therefore runs the
same sweep, simulated once with `max-num-seqs` = the largest concurrency.

Pruning (bounds, docs/plan.md §4): a request served with others is never faster than served
alone, because a step's cost only grows with the work batched into it and a lone request never
waits or loses its blocks (docs/simulator.md §2, §5). A c1 probe of each arm and pool (a
sweep of that one point) bounds every point of that arm and pool:

1. attainment <= the probe's: only the turns that meet the objectives alone can meet them
   under load, and every point replays the same turns. A probe below `--min-attainment`
   prunes the arm and pool: no point of it can qualify (its c1 rows are the probe's own);
2. goodput <= attainment bound x c / mean latency alone: a worker is busy with one request at
   a time, so requests per second <= c / mean latency (think time only lowers it). A server
   whose every point's bound is below both the top-N's last goodput and its arm's best cannot
   enter the table or change its arm's best, so it is not simulated.

Servers are decided in batches in descending bound order, so the counts of pruned
configurations do not depend on the number of worker processes.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from harness.plan.arms import Config
from harness.plan.evaluate import Outcome, cache_key, evaluate, read_cached
from harness.plan.inputs import PlanRequest

BATCH = 4  # servers decided between two updates of the bounds
Progress = Callable[[int, int], None]
Unit = tuple[str, float, int]  # arm, pool, simulated max-num-seqs


@dataclass
class Entry:
    """One configuration of the grid and how its outcome was obtained."""

    config: Config
    outcome: Outcome | None  # None: pruned
    source: str  # simulated | cached | shared | probe | pruned | refused
    note: str | None = None

    @property
    def goodput_rps(self) -> float | None:
        if self.outcome is None or not self.outcome.ok:
            return None
        return self.outcome.metrics.get("goodput_rps")


@dataclass
class SearchResult:
    request: PlanRequest
    entries: list[Entry]
    probes: dict[tuple[str, float], Outcome]
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def qualifies(outcome: Outcome | None, request: PlanRequest) -> bool:
    if outcome is None or not outcome.ok:
        return False
    att = outcome.metrics.get("slo_attainment")
    good = outcome.metrics.get("goodput_rps")
    return att is not None and att >= request.min_attainment and good is not None


def unit_of(config: Config, chain: tuple[int, ...]) -> Unit:
    """Configurations of one unit run one identical sweep (module docstring)."""
    return (config.arm, config.pool_gib, min(config.max_num_seqs, max(chain)))


def goodput_bound(probe: Outcome, concurrency: int) -> float:
    """Rule 2's ceiling on goodput (requests/s) at `concurrency` (module docstring)."""
    if not probe.ok or not probe.mean_latency_s:
        return float("inf")  # no bound without a probe
    attainment = probe.metrics.get("slo_attainment")
    share = 1.0 if attainment is None else attainment
    return share * concurrency / probe.mean_latency_s


class _Runner:
    """Evaluates servers over a chain of points: cache first, the misses in parallel."""

    def __init__(self, request: PlanRequest, jobs: int, use_cache: bool) -> None:
        self.request, self.jobs, self.use_cache = request, jobs, use_cache
        self.pool: ProcessPoolExecutor | None = None
        self.simulated = self.cached = 0

    def run(self, items: list[tuple[Unit, tuple[int, ...]]]) -> list[tuple[list[Outcome], bool]]:
        """(outcomes, from the cache) per item."""
        found: list[list[Outcome] | None] = []
        for unit, chain in items:
            hit = read_cached(cache_key(self.request, _config(unit), chain))
            ok = self.use_cache and hit is not None and len(hit) == len(chain)
            found.append(hit if ok else None)
        misses = [i for i, f in enumerate(found) if f is None]
        args = [(self.request, items[i][0], items[i][1], self.use_cache) for i in misses]
        if self.jobs > 1 and len(args) > 1:
            if self.pool is None:
                context = multiprocessing.get_context("fork")  # workers inherit the imports
                self.pool = ProcessPoolExecutor(self.jobs, mp_context=context)
            results = list(self.pool.map(_work, args))
        else:
            results = [_work(a) for a in args]
        for i, result in zip(misses, results, strict=True):
            found[i] = result
        self.cached += len(items) - len(misses)
        self.simulated += len(misses)
        return [(f or [], i not in misses) for i, f in enumerate(found)]

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()


def _config(unit: Unit) -> Config:
    return Config(unit[0], unit[1], unit[2], 0)


def _work(args: tuple[PlanRequest, Unit, tuple[int, ...], bool]) -> list[Outcome]:
    request, unit, chain, use_cache = args
    return evaluate(request, _config(unit), chain, use_cache=use_cache)[0]


def search(
    request: PlanRequest,
    *,
    jobs: int = 2,
    use_cache: bool = True,
    prune: bool = True,
    progress: Progress | None = None,
) -> SearchResult:
    start = time.perf_counter()
    chain = tuple(sorted(request.concurrency))
    grid = request.grid()
    members: dict[Unit, list[Config]] = {}
    for config in grid:
        members.setdefault(unit_of(config, chain), []).append(config)
    state = _State(request, chain, members, progress)
    runner = _Runner(request, jobs, use_cache)
    try:
        probes = _probe(request, runner)
        _sweep_units(state, runner, probes, prune)
    finally:
        runner.close()
    entries = state.entries(grid)
    counts = {"simulated_sweeps": runner.simulated, "cached_sweeps": runner.cached}
    counts |= _tally(entries, len(members), request)
    return SearchResult(request, entries, probes, counts, time.perf_counter() - start)


class _State:
    """Outcomes per unit as they are decided, the running bests, and the progress count."""

    def __init__(self, request: PlanRequest, chain: tuple[int, ...],
                 members: dict[Unit, list[Config]], progress: Progress | None) -> None:  # fmt: skip
        self.request, self.chain, self.members, self.progress = request, chain, members, progress
        self.done: dict[Unit, tuple[list[Outcome | None], str, str | None]] = {}
        self.resolved = 0
        self.best: list[float] = []  # qualifying goodputs so far, best first
        self.arm_best: dict[str, float] = {}

    def settle(self, unit: Unit, outcomes: list[Outcome | None], how: str,
               note: str | None = None) -> None:  # fmt: skip
        self.done[unit] = (outcomes, how, note)
        self.resolved += len(self.members[unit])
        for outcome in outcomes:
            if qualifies(outcome, self.request):
                assert outcome is not None
                value = outcome.metrics.get("goodput_rps") or 0.0
                self.best = sorted([*self.best, value], reverse=True)
                self.arm_best[unit[0]] = max(self.arm_best.get(unit[0], 0.0), value)
        if self.progress is not None:
            self.progress(self.resolved, sum(len(m) for m in self.members.values()))

    def entries(self, grid: list[Config]) -> list[Entry]:
        out = []
        first_mns: dict[Unit, int] = {}  # the max-num-seqs whose sweep the unit's others share
        for config in grid:
            unit = unit_of(config, self.chain)
            outcomes, how, note = self.done[unit]
            outcome = outcomes[self.chain.index(config.concurrency)]
            mns = first_mns.setdefault(unit, config.max_num_seqs)
            if how in ("simulated", "cached") and mns != config.max_num_seqs:
                how = "shared"
            if how == "pruned" and outcome is not None:
                how = "probe"  # a c1 row of a pruned arm and pool: the probe's own point
            out.append(Entry(config, outcome, how, note))
        return out


def _probe(request: PlanRequest, runner: _Runner) -> dict[tuple[str, float], Outcome]:
    """The c1 point of every arm and pool, alone on a fresh server."""
    pairs = [(a, p) for a in request.arms for p in request.pools_gib]
    results = runner.run([((a, p, 1), (1,)) for a, p in pairs])
    return {pair: outcomes[0] for pair, (outcomes, _hit) in zip(pairs, results, strict=True)}


def _sweep_units(state: _State, runner: _Runner, probes: dict, prune: bool) -> None:
    chain = state.chain
    bound = {u: max(goodput_bound(probes[(u[0], u[1])], c) for c in chain) for u in state.members}
    pending = sorted(state.members, key=lambda u: (-bound[u], u))
    while pending:
        batch: list[Unit] = []
        while pending and len(batch) < BATCH:
            unit = pending.pop(0)
            probe = probes[(unit[0], unit[1])]
            if not probe.ok:  # the engine refuses this arm and pool at any point: exact
                state.settle(unit, [probe for _ in chain], "refused", probe.reason)
                continue
            reason = _prune_reason(state, probe, bound[unit], unit[0]) if prune else None
            if reason:
                c1 = [probe if c == 1 else None for c in chain]  # the probe is the c1 point
                state.settle(unit, c1, "pruned", reason)
            else:
                batch.append(unit)
        results = runner.run([(u, chain) for u in batch])
        for unit, (outcomes, hit) in zip(batch, results, strict=True):
            state.settle(unit, list(outcomes), "cached" if hit else "simulated")


def _prune_reason(state: _State, probe: Outcome, bound: float, arm: str) -> str | None:
    r = state.request
    attainment = probe.metrics.get("slo_attainment")
    if attainment is not None and attainment < r.min_attainment:
        return (
            f"cannot meet the objectives: alone (c1) {attainment:.0%} of requests meet them "
            f"< {r.min_attainment:.0%}"
        )
    if len(state.best) >= r.top and arm in state.arm_best:
        floor = state.best[r.top - 1]
        if bound < floor and bound < state.arm_best[arm]:
            return (
                f"goodput bound {bound / r.gpus:.4f} req/s/GPU < the top {r.top}'s "
                f"{floor / r.gpus:.4f} and {arm}'s best"
            )
    return None


def _tally(entries: list[Entry], units: int, request: PlanRequest) -> dict[str, int]:
    return {
        "configurations": len(entries),
        "servers": units,
        "shared": sum(1 for e in entries if e.source == "shared"),
        "pruned": sum(1 for e in entries if e.source == "pruned"),
        "refused": sum(1 for e in entries if e.outcome is not None and not e.outcome.ok),
        "qualifying": sum(1 for e in entries if qualifies(e.outcome, request)),
    }
