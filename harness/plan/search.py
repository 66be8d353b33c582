"""The search: every configuration of the grid gets an outcome, simulated, read from the cache,
shared with an identical simulation, or pruned by a bound that cannot change the answer.

A *server* is an arm, a host pool and a max-num-seqs; it runs the grid's concurrencies in
ascending order as one simulated sweep (evaluate.py), so one simulation answers a whole row of
the grid.

Sharing (exact): `max-num-seqs` only caps the scheduler's running list, which never holds more
requests than a point's workers have in flight, and the pools are sized without it
(docs/simulator.md §2-§3). Every `max-num-seqs >= the largest concurrency` therefore runs the
same sweep, simulated once with `max-num-seqs` = the largest concurrency.

Pruning (a bound, docs/plan.md §4): a request served with others is never faster than served
alone, because a step's cost only grows with the work batched into it and a lone request never
waits or loses its blocks (docs/simulator.md §2, §5). So the attainment of any point of an arm
and pool is at most that of its c1 probe (that point alone on a fresh server): only the turns
that meet the objectives alone can meet them under load, and every point replays the same
turns. A probe below `--min-attainment` prunes every sweep of its arm and pool (their c1 rows
are the probe's own point). The rule is decided from the probes alone, before any sweep, so
what it prunes does not depend on the order or the number of worker processes.

A probe the engine refuses to start (a pool vLLM would refuse) answers every point of its arm
and pool: the refusal does not depend on the point.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from harness.plan.arms import Config
from harness.plan.evaluate import Outcome, cache_key, evaluate, read_cached
from harness.plan.inputs import PlanRequest

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


class _Runner:
    """Evaluates servers over a chain of points: cache first, the misses in parallel."""

    def __init__(self, request: PlanRequest, jobs: int, use_cache: bool) -> None:
        self.request, self.jobs, self.use_cache = request, jobs, use_cache
        self.pool: ProcessPoolExecutor | None = None
        self.simulated = self.cached = 0

    def run(
        self, items: list[tuple[Unit, tuple[int, ...]]]
    ) -> Iterator[tuple[int, list[Outcome], bool]]:
        """(index into `items`, outcomes, from the cache), cached items first, then each
        simulated one as it finishes (so progress moves while the workers run)."""
        misses = []
        for i, (unit, chain) in enumerate(items):
            hit = (
                read_cached(cache_key(self.request, _config(unit), chain))
                if self.use_cache
                else None
            )
            if hit is not None and len(hit) == len(chain):
                self.cached += 1
                yield i, hit, True
            else:
                misses.append(i)
        args = [(self.request, items[i][0], items[i][1], self.use_cache) for i in misses]
        results: Iterator[list[Outcome]]
        if self.jobs > 1 and len(args) > 1:
            if self.pool is None:
                context = multiprocessing.get_context("fork")  # workers inherit the imports
                self.pool = ProcessPoolExecutor(self.jobs, mp_context=context)
            results = self.pool.map(_work, args)
        else:
            results = (_work(a) for a in args)
        for i, outcomes in zip(misses, results, strict=True):
            self.simulated += 1
            yield i, outcomes, False

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
    """Outcomes per unit as they are decided, and the progress count."""

    def __init__(self, request: PlanRequest, chain: tuple[int, ...],
                 members: dict[Unit, list[Config]], progress: Progress | None) -> None:  # fmt: skip
        self.request, self.chain, self.members, self.progress = request, chain, members, progress
        self.done: dict[Unit, tuple[list[Outcome | None], str, str | None]] = {}
        self.resolved = 0

    def settle(self, unit: Unit, outcomes: list[Outcome | None], how: str,
               note: str | None = None) -> None:  # fmt: skip
        self.done[unit] = (outcomes, how, note)
        self.resolved += len(self.members[unit])
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
    return {pairs[i]: outcomes[0] for i, outcomes, _hit in results}


def _sweep_units(state: _State, runner: _Runner, probes: dict, prune: bool) -> None:
    chain = state.chain
    todo: list[Unit] = []
    for unit in state.members:
        probe = probes[(unit[0], unit[1])]
        if not probe.ok:  # the engine refuses this arm and pool at any point: exact
            state.settle(unit, [probe for _ in chain], "refused", probe.reason)
        elif prune and (reason := _prune_reason(state.request, probe)):
            c1 = [probe if c == 1 else None for c in chain]  # the probe is the c1 point
            state.settle(unit, c1, "pruned", reason)
        else:
            todo.append(unit)
    for i, outcomes, hit in runner.run([(u, chain) for u in todo]):
        state.settle(todo[i], list(outcomes), "cached" if hit else "simulated")


def _prune_reason(request: PlanRequest, probe: Outcome) -> str | None:
    attainment = probe.metrics.get("slo_attainment")
    if attainment is not None and attainment < request.min_attainment:
        return (
            f"cannot meet the objectives: alone (c1) {attainment:.0%} of requests meet them "
            f"< {request.min_attainment:.0%}"
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
