"""Predict a real CPU run with the simulator and set the prediction beside the measurement.

`predict_run(fit_run, real_run, out)` fits `CpuCost` on the unpressured `fit_run`, replays
`real_run`'s profile and sweep (its manifest; the measured points are not read) and writes a
simulated run directory in the sweep schema (manifest `engine: sim`, the fit as its
calibration). `parity_rows` then compares per point: occupancy, waiting (mean, max),
preemptions, with the capacity model's static limit for the longest request of the point.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from harness import metric_names as mn
from harness.analysis.metrics import gauge_per_scrape
from harness.client.plan import plan_points
from harness.client.scrape import read_samples_csv
from harness.errors import RunError
from harness.names import check_name
from harness.results import (
    PointRecord,
    Run,
    RunLayout,
    RunManifest,
    load_run,
)
from harness.sim.client import PointClient, Workload
from harness.sim.parity import (
    CpuCost,
    CpuEngine,
    CpuSetup,
    RequestTimes,
    StatsScheduler,
    cpu_serve,
    fit_cpu_cost,
    point_deltas,
    recorded_workload,
)
from harness.sim.parity_pace import Pace, measured_targets, recorded_workloads, solve_paces
from harness.sim.parity_spread import total_interval
from harness.sim.parity_stalls import SharedStalls, point_stalls
from harness.sim.run import _record, simulated_manifest, write_simulated_run
from harness.sim.run import measurement as measured_point

# Targets of issue 12 (item 5): occupancy within 15 %; preemptions and waiting of the same order.
OCCUPANCY_TOLERANCE = 0.15
STALL_HORIZON_S = 600.0  # pauses are drawn this far past a point's start: longer than any CPU point


def _resent(workload: Workload, extra: float) -> Workload:
    """Add the re-tokenised reply's excess to every turn after the first."""
    add = round(extra)
    turns = tuple((t[0], *(x + add for x in t[1:])) for t in workload.turns)
    return Workload(turns, f"{workload.source} (+{add} tokens per re-sent reply)")


def simulate_like(
    real_run: Path | str,
    cost: CpuCost,
    paces: dict[str, Pace] | None = None,
    workloads: dict[str, Workload] | None = None,
    seed: int | None = None,
    stalls: dict[str, SharedStalls] | None = None,
) -> tuple[Any, list[tuple[PointRecord, list]], dict[str, RequestTimes]]:
    """Simulate `real_run`'s profile and sweep with `cost`, or per point with its `paces` and
    `workloads` (harness.sim.parity_pace; a point without them runs at `cost` on the dataset's
    templated counts): (manifest, setup, workload), [(record, samples)], {point id: the
    simulated request times}. With a `seed`, each request's out-of-engine time is drawn with
    the cost's `overhead_sd_s` (harness.sim.parity_spread), else it is the mean; and with
    `stalls` too, each point's shared pauses are drawn from its entry (harness.sim.parity_stalls)."""
    run = load_run(real_run)
    man = run.manifest
    if man.simulated:
        raise RunError(f"{run.root}: a simulated run; predict a real one")
    setup = CpuSetup(
        cpu_serve(man.profile),
        cost,
        str(man.profile.get("serve", {}).get("served-model-name", "tiny")),
    )
    workload = _resent(recorded_workload(run), cost.resent_reply_tokens)
    sweep = man.sweep
    turns = min(workload.num_turns, sweep.get("max_turns") or workload.num_turns)
    engine = setup.build()
    assert isinstance(engine, CpuEngine) and isinstance(engine.scheduler, StatsScheduler)
    if seed is not None:
        engine.rng, engine.overhead_sd_s = random.Random(seed), cost.overhead_sd_s
    planned = plan_points(
        [tuple(p) for p in sweep["points"]],
        dataset_offset=sweep["dataset_offset"],
        num_conversations=workload.num_conversations,
        repeats=int(man.repeats or 1),
    )
    out, times = [], {}
    for plan in planned:
        pace = (paces or {}).get(plan.point_id)
        engine.cost = pace.cost(cost) if pace else cost
        engine.overhead_s = pace.overhead_s if pace else cost.overhead_at(plan.parallel)
        stall = (stalls or {}).get(plan.point_id) if seed is not None else None
        engine.stalls = None
        engine.stall_mean_wait_s = stall.mean_wait_s if stall else 0.0
        if stall:  # drawn from its own stream, apart from the per-request draws
            draws = random.Random(f"{seed}:{plan.point_id}")
            engine.stalls = stall.windows(draws, engine.now, STALL_HORIZON_S)
        client = PointClient(
            (workloads or {}).get(plan.point_id, workload),
            plan.conversations,
            plan.parallel,
            turns,
            sweep["max_tokens"],
            setup.max_model_len,
        )
        sched = engine.scheduler
        sched.hold(engine.now)
        before, gauge = replace(sched.times), replace(sched.gauge)
        res = engine.run_point(client, float(sweep["scrape_interval_s"]))
        sched.hold(engine.now)
        times[plan.point_id] = sched.times.minus(before)
        record = _record(plan, measured_point(client, res, parallel=plan.parallel), res, turns, 1)
        record.fidelity["gauge_time_mean"] = sched.gauge.minus(gauge).nonzero_mean
        out.append((record, res.samples))
        engine.now += float(sweep.get("sleep_between_points_s", 0.0))
    return (man, setup, workload), out, times


def paced_simulation(
    real_run: Path | str, cost: CpuCost
) -> tuple[Any, list[tuple[PointRecord, list]], dict[str, Pace], float, dict[str, Workload]]:
    """Simulate `real_run` with every valid point at its own measured pace (fixed point of
    `parity_pace.next_paces`) and with its requests' served prompt lengths: (simulate_like's
    first two, the paces, the last change, the per-point workloads)."""
    run = load_run(real_run)
    workloads = recorded_workloads(run.root, recorded_workload(run))
    paces, change = solve_paces(
        measured_targets(real_run), lambda p: simulate_like(real_run, cost, p, workloads)[2]
    )
    info, results, _ = simulate_like(real_run, cost, paces, workloads)
    return info, results, paces, change, workloads


def attach_ensemble(
    results: list[tuple[PointRecord, list]],
    replays: list[list[tuple[PointRecord, list]]],
    overhead_sd_s: float,
    stalls: dict[str, SharedStalls] | None = None,
) -> None:
    """Record in each point's `fidelity.ensemble` its seeded replays' preemption counts and
    engine occupancies (harness.sim.parity_spread), in seed order, and the shared pauses they
    drew from (harness.sim.parity_stalls)."""
    for index, (record, _) in enumerate(results):
        points = [replay[index][0] for replay in replays]
        if any(p.point_id != record.point_id for p in points):
            raise RunError(f"point {record.point_id}: a seeded replay planned other points")
        counts = [int(p.metrics.get("preemptions") or 0) for p in points]
        record.fidelity["ensemble"] = {
            "seeds": len(points),
            "overhead_sd_s": overhead_sd_s,
            "preemptions": counts,
            "preemptions_mean": sum(counts) / len(counts),
            "engine_occupancy": [p.metrics.get("engine_occupancy") for p in points],
        }
        stall = (stalls or {}).get(record.point_id)
        if stall is not None:
            record.fidelity["ensemble"]["stalls"] = {
                "rate_per_s": stall.rate_per_s,
                "measured": len(stall.durations_s),
                "mean_duration_s": stall.mean_duration_s,
                "mean_wait_s": stall.mean_wait_s,
            }
        # the central 80 % of the counts, for the report's interval column
        record.fidelity.setdefault("interval80", {})["preemptions"] = list(total_interval([counts]))


def predict_run(
    fit_run: Path | str,
    real_run: Path | str,
    out: Path,
    run_id: str | None = None,
    *,
    paced: bool = False,
    seeds: int = 0,
    stalls: bool = True,
) -> Path:
    """Fit on `fit_run`, simulate `real_run`'s sweep; write and return the simulated run dir.
    `paced`: every valid point at its own measured pace (harness.sim.parity_pace), else the
    fit's step cost and out-of-engine line throughout. `seeds` > 0: also replay it that many
    times with drawn out-of-engine times (`attach_ensemble`), and with `stalls` each point's
    shared pauses drawn as measured (harness.sim.parity_stalls)."""
    real_root = Path(real_run).resolve()
    # a run id of 125+ characters makes a default that is no name (harness/names.py)
    rid = run_id or check_name(
        f"sim-{load_run(real_run).manifest.run_id}", f"{real_run}: default run id (give --run-id)"
    )
    run_dir = Path(out) / rid
    if run_dir.exists():
        raise RunError(
            f"{run_dir}: already exists; a simulation never writes into an existing run directory"
        )
    cost, _ = fit_cpu_cost(fit_run)
    fit: dict[str, Any] = {
        "path": str(Path(fit_run).resolve()),
        "kind": "cpu-parity-fit",
        "params": asdict(cost),
    }
    paces: dict[str, Pace] | None = None
    workloads: dict[str, Workload] | None = None
    if paced:
        (man, setup, workload), results, paces, change, workloads = paced_simulation(real_run, cost)
        fit["paces"] = {pid: asdict(p) for pid, p in paces.items()}
        fit["pace_last_change"] = change
    else:
        (man, setup, workload), results, _ = simulate_like(real_run, cost)
    if seeds > 0:
        pauses = point_stalls(load_run(real_run)) if stalls else {}
        replays = [
            simulate_like(real_run, cost, paces, workloads, seed=seed, stalls=pauses)[1]
            for seed in range(seeds)
        ]
        attach_ensemble(results, replays, cost.overhead_sd_s, pauses)
    layout = RunLayout(run_dir)
    run_dir.mkdir(parents=True)
    digest = hashlib.sha256(repr(workload.turns).encode()).hexdigest()
    manifest = simulated_manifest(
        rid,
        profile_name=man.profile_name,
        profile=man.profile,
        overrides=list(man.overrides),
        gpus=1,
        dataset={**man.dataset, "sha256": digest, "manifest": {"token_counts_only": True}},
        configuration_key=man.configuration_key,
        sweep=man.sweep,
        planned_points=[r.point_id for r, _ in results],
        build={
            "engine": "sim",
            "calibration": fit,
            "setup": {**setup.facts(), "longest_request_tokens": _longest(workload, man.sweep)},
            "predicts": str(real_root),
        },
        notes=[
            "simulated run: times are virtual seconds",
            f"CPU parity prediction of {real_root}, step cost fitted on {fit['path']}",
        ],
    )
    write_simulated_run(layout, manifest, results)
    return run_dir


def pace_lines(sim_run: Path | str) -> list[str]:
    """The pace each point of a paced prediction was replayed at (harness.sim.parity_pace)."""
    fit = (load_run(sim_run).manifest.build or {}).get("calibration") or {}
    paces = fit.get("paces") or {}
    lines = [
        f"  {pid}: decode x{p['decode_scale']:.2f}, prefill x{p['prefill_scale']:.2f}, "
        f"out of engine {1e3 * p['overhead_s']:.0f} ms"
        for pid, p in paces.items()
    ]
    if paces:
        lines.append(f"  last relative change of a scale: {fit['pace_last_change']:.4f}")
    return lines


@dataclass(frozen=True)
class ParityRow:
    point_id: str
    label: str
    static_limit: int | None
    measured: dict[str, float | None]
    predicted: dict[str, float | None]
    preemption_draws: tuple[int, ...] = ()  # the seeded replays' counts (parity_spread)

    @property
    def preemptions_predicted(self) -> float | None:
        """The ensemble's mean count where the prediction has one (a single replay's 0 or 1
        is one draw of which turns overlap), else the replay's count."""
        if self.preemption_draws:
            return sum(self.preemption_draws) / len(self.preemption_draws)
        return self.predicted.get("preemptions")

    @property
    def occupancy_key(self) -> str:
        """What the verdict compares: the engine occupancy where both sides have it (every
        request counted; the gauge's scrapes alias with a fast server's turns, docs/simulator.md
        §6c), else the gauge's occupancy."""
        both = self.measured.get("engine_occupancy") and self.predicted.get("engine_occupancy")
        return "engine_occupancy" if both else "occupancy"

    @property
    def occupancy_error(self) -> float | None:
        return self.error(self.occupancy_key)

    def error(self, key: str) -> float | None:
        """(predicted - measured) / measured, or None without both."""
        m, p = self.measured.get(key), self.predicted.get(key)
        return None if not m or p is None else (p - m) / m


PARITY_METRICS = (
    "occupancy",
    "waiting_mean",
    "waiting_max",
    "preemptions",
    "client_in_flight_mean",
)


def _longest(workload: Workload, sweep: dict[str, Any]) -> int:
    """The last turn's context (prompt + reply): what one request must hold at its end."""
    reply = int(sweep["max_tokens"])
    turns = min(workload.num_turns, sweep.get("max_turns") or workload.num_turns)
    return max(sum(u[:turns]) + turns * reply for u in workload.turns)


def static_limit(sim_manifest: RunManifest) -> int | None:
    """The capacity model's baseline limit (harness.capacity.formulas.capacity_at's
    pool // ceil(seq / block), capped by max-num-seqs) for the longest request, or None."""
    setup = (sim_manifest.build or {}).get("setup") or {}
    pool, bt = setup.get("pool_units"), setup.get("block_tokens")
    seq, seqs = setup.get("longest_request_tokens"), setup.get("max_num_seqs")
    if not (
        isinstance(pool, int)
        and isinstance(bt, int)
        and isinstance(seq, int)
        and isinstance(seqs, int)
        and min(pool, bt, seq, seqs) > 0
    ):
        return None
    return min(seqs, pool // -(-seq // bt))


def waiting_busy_mean(run: Run, point: PointRecord) -> float | None:
    """Mean `num_requests_waiting` over the scrapes where the server had work (running or
    waiting > 0). A real point's samples include the client's start-up (seconds of an idle
    server), which dilutes `waiting_mean`; a simulated point has none."""
    path = RunLayout(run.root).samples_csv(point.point_id)
    if not path.exists():
        return None
    samples = read_samples_csv(path, [mn.NUM_REQUESTS_RUNNING, mn.NUM_REQUESTS_WAITING])
    running = dict(gauge_per_scrape(samples, mn.NUM_REQUESTS_RUNNING))
    waiting = dict(gauge_per_scrape(samples, mn.NUM_REQUESTS_WAITING))
    busy = [w for t, w in waiting.items() if w > 0 or running.get(t, 0.0) > 0]
    return sum(busy) / len(busy) if busy else None


def queue_per_request(run: Run, point: PointRecord) -> float | None:
    """vLLM's queue time per request over the point's window (the simulated engine exports the
    same histogram sums), or None without them."""
    try:
        d = point_deltas(run, point)
    except RunError:
        return None
    return d.queue_s / d.requests


def engine_occupancy(run: Run, point: PointRecord) -> float | None:
    """Requests in the engine on average over the point, without sampling: the point's
    `engine_occupancy` metric; for a record written before it, vLLM's inference time (first
    schedule to last token) summed over the window, over the client's duration."""
    recorded = point.metrics.get("engine_occupancy")
    if recorded is not None:
        return recorded
    try:
        d = point_deltas(run, point)
    except RunError:
        return None
    duration = point.metrics.get("duration_s")
    return d.inference_s / duration if duration else None


def _measures(run: Run, point: PointRecord) -> dict[str, float | None]:
    out = {k: point.metrics.get(k) for k in PARITY_METRICS}
    out["waiting_busy_mean"] = waiting_busy_mean(run, point)
    out["queue_s"] = queue_per_request(run, point)
    out["engine_occupancy"] = engine_occupancy(run, point)
    # a simulated point also knows its gauge's time average (the expected scrape mean)
    out["gauge_time_mean"] = point.fidelity.get("gauge_time_mean")
    return out


def parity_rows(real_run: Path | str, sim_run: Path | str) -> list[ParityRow]:
    """One row per real point that the simulated run also has (matched by point id)."""
    real, sim = load_run(real_run), load_run(sim_run)
    limit = static_limit(sim.manifest)
    by_id = {p.point_id: p for p in sim.points}
    return [
        ParityRow(
            point.point_id,
            point.label,
            limit,
            _measures(real, point),
            _measures(sim, by_id[point.point_id]),
            tuple(by_id[point.point_id].fidelity.get("ensemble", {}).get("preemptions", ())),
        )
        for point in real.points
        if point.point_id in by_id
    ]


def format_rows(rows: list[ParityRow]) -> str:
    head = (
        f"{'point':<15}{'limit':>6}  {'engine occ meas/pred (err)':<28}{'gauge occ meas/pred':<21}"
        f"{'waiting busy meas/pred':<24}{'waiting max':<14}{'preemptions':<12}"
    )
    lines = [head]
    for r in rows:
        m, p = r.measured, r.predicted
        engine = (
            f"{_f(m.get('engine_occupancy'))}/{_f(p.get('engine_occupancy'))} "
            f"({_pct(r.error('engine_occupancy'))})"
        )
        gauge = f"{_f(m['occupancy'])}/{_f(p['occupancy'])}"
        lines.append(
            f"{r.point_id:<15}{_f(r.static_limit, 'd'):>6}  {engine:<28}{gauge:<21}"
            f"{_f(m['waiting_busy_mean'])}/{_f(p['waiting_busy_mean']):<19}"
            f"{_f(m['waiting_max'], '.0f')}/{_f(p['waiting_max'], '.0f'):<11}"
            f"{_f(m['preemptions'], '.0f')}/{_preempt(r)}"
        )
    return "\n".join(lines)


def _preempt(row: ParityRow) -> str:
    """The replay's count, or the ensemble's mean and range."""
    draws = row.preemption_draws
    if not draws:
        return _f(row.predicted.get("preemptions"), ".0f")
    return f"{_f(row.preemptions_predicted)} [{min(draws)}-{max(draws)}]"


def _f(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.0f}%"


def same_order(a: float | None, b: float | None, factor: float = 3.0) -> bool:
    """Counts of the same order: (a + 1) and (b + 1) within `factor` of each other (the +1
    lets 0 and 1 preemptions agree, 0 and 5 not)."""
    if a is None or b is None:
        return False
    lo, hi = sorted((a + 1.0, b + 1.0))
    return hi <= factor * lo


def target_misses(
    rows: list[ParityRow], occupancy_tolerance: float = OCCUPANCY_TOLERANCE
) -> list[str]:
    """Issue 12's parity targets, per point: occupancy within 15 % (or `occupancy_tolerance`),
    waiting (busy mean, max) and preemptions of the same order. [] when every point meets them."""
    misses = []
    for r in rows:
        err, key = r.occupancy_error, r.occupancy_key
        if err is None or abs(err) > occupancy_tolerance:
            misses.append(f"{r.label}: {key} {r.predicted.get(key)} vs {r.measured.get(key)}")
        for key in ("waiting_busy_mean", "waiting_max"):
            if not same_order(r.predicted.get(key), r.measured.get(key)):
                misses.append(f"{r.label}: {key} {r.predicted.get(key)} vs {r.measured.get(key)}")
        if not same_order(r.preemptions_predicted, r.measured.get("preemptions")):
            misses.append(
                f"{r.label}: preemptions {r.preemptions_predicted} vs {r.measured.get('preemptions')}"
            )
    return misses
