"""One server configuration -> the calibrated simulator's prediction of its points, cached.

A server (arm, host pool, max-num-seqs) runs the grid's concurrencies in ascending order, one
point after another on one simulated engine, exactly as `repro simulate` runs a sweep: two
conversations per worker, the workload's turns, think time and objectives (docs/plan.md §3).
The cache key hashes everything that changes the result: the simulator's and
analysis code, the arm's profile files and overrides, the GPU, the calibration file, the
workload, the objectives and the point; anything else cannot change it, so a hit is returned
as stored.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from harness.paths import PROFILES_DIR, REPO_ROOT, cache_dir
from harness.plan.arms import ARMS, Config, server_overrides
from harness.plan.inputs import PlanRequest
from harness.results import atomic_write_text

CACHE_SCHEMA = "repro.plan-outcome/1"
# Code whose change can change a prediction: the simulator, the metrics and goodput it is
# derived with, the capacity model it sizes pools from, think time, the point plan, this file.
_CODE = (
    "harness/sim",
    "harness/analysis/metrics.py",
    "harness/analysis/goodput.py",
    "harness/analysis/slo.py",
    "harness/analysis/request_table.py",
    "harness/capacity/deployment.py",
    "harness/capacity/formulas.py",
    "harness/capacity/model.py",
    "harness/dataset/thinktime.py",
    "harness/client/plan.py",
    "harness/dataset/rotation.py",
    "harness/plan/evaluate.py",
    "harness/plan/arms.py",
)
KEPT_METRICS = (
    "occupancy",
    "interactivity",
    "throughput_per_gpu",
    "output_throughput_per_gpu",
    "request_throughput",
    "goodput_rps",
    "slo_attainment",
    "mean_ttft_ms",
    "mean_tpot_ms",
    "preemptions",
    "waiting_mean",
    "offload_load_gib",
    "hisparse_h2d_gib",
    "duration_s",
    *(f"p{p}_{m}" for m in ("ttft_ms", "tpot_ms", "e2e_s") for p in (50, 90, 99)),
)


@dataclass
class Outcome:
    """What the search keeps of one simulated point (or the engine's refusal to start)."""

    status: str  # "simulated" or "refused"
    reason: str | None = None
    metrics: dict[str, float | None] = field(default_factory=dict)
    interval80: dict[str, list[float]] = field(default_factory=dict)
    mean_latency_s: float | None = None
    requests: int = 0
    failed: int = 0
    engine_steps: int = 0

    @property
    def ok(self) -> bool:
        return self.status == "simulated"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Outcome:
        return cls(**data)


@lru_cache(maxsize=1)
def code_digest() -> str:
    digest = hashlib.sha256()
    for entry in _CODE:
        root = REPO_ROOT / entry
        for path in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            digest.update(path.relative_to(REPO_ROOT).as_posix().encode())
            digest.update(path.read_bytes())
    for name in sorted({a.profile for a in ARMS.values()}):  # and what they extend
        digest.update((PROFILES_DIR / f"{name}.yaml").read_bytes())
    return digest.hexdigest()


def _file_digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def sweep_overrides(request: PlanRequest, chain: tuple[int, ...]) -> list[str]:
    w = request.traffic
    think = json.dumps(w.think.model_dump(mode="json", exclude_none=True))
    points = json.dumps([[c, w.conversations(c)] for c in chain])
    return [
        f"sweep.points={points}",
        f"sweep.max_tokens={w.output_tokens}",
        f"sweep.slo={request.objectives.text()}",
        f"sweep.think_time={think}",
    ]


def cache_key(request: PlanRequest, unit: Config, chain: tuple[int, ...]) -> str:
    material = {
        "schema": CACHE_SCHEMA,
        "code": code_digest(),
        "profile": ARMS[unit.arm].profile,
        "overrides": server_overrides(unit, model_id=request.model_id, tp=request.tp)
        + sweep_overrides(request, chain),
        "gpu": request.gpu,
        "calibration": _file_digest(str(request.calibration)) if request.calibration else None,
        "workload": request.traffic.to_json(),
    }
    think = request.traffic.think
    if think.kind == "file" and think.path:  # the pauses are the file's contents, not its name
        material["think_file"] = _file_digest(think.path)
    text = json.dumps(material, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def cache_path(key: str) -> Path:
    return cache_dir() / "plan" / f"{key}.json"


def read_cached(key: str) -> list[Outcome] | None:
    path = cache_path(key)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("schema") != CACHE_SCHEMA:
            return None
        return [Outcome.from_json(item) for item in data["outcomes"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent, half-written by another tool or stale: simulate again


def write_cached(key: str, outcomes: list[Outcome]) -> None:
    path = cache_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"schema": CACHE_SCHEMA, "outcomes": [o.to_json() for o in outcomes]})
    atomic_write_text(path, text)


@lru_cache(maxsize=4)
def _calibration(path: str | None) -> Any:
    from harness.sim.config import load_calibration

    return load_calibration(Path(path)) if path else None


def simulator_setup(request: PlanRequest, unit: Config, chain: tuple[int, ...]) -> tuple[Any, Any]:
    """(profile, SimSetup) of the server of `unit` (its arm, pool and max-num-seqs) that runs
    the points of `chain`."""
    from harness.serve.profiles import load_profile
    from harness.sim.config import setup_from_profile

    overrides = server_overrides(unit, model_id=request.model_id, tp=request.tp) + sweep_overrides(
        request, chain
    )
    prof = load_profile(ARMS[unit.arm].profile, overrides)
    cal = _calibration(str(request.calibration) if request.calibration else None)
    return prof, setup_from_profile(prof, cal, gpu=request.gpu)


def simulate(request: PlanRequest, unit: Config, chain: tuple[int, ...]) -> list[Outcome]:
    """The points of `chain`, in order, on one simulated server, as `repro simulate` runs a
    sweep: the calibration was fitted to such sweeps (docs/plan.md §3)."""
    from harness.sim.client import shaped_workload
    from harness.sim.run import simulate_points
    from harness.sim.startup import EngineRefused

    try:
        prof, setup = simulator_setup(request, unit, chain)
    except EngineRefused as exc:
        return [Outcome("refused", reason=exc.reason) for _ in chain]
    w = request.traffic
    shape = shaped_workload(
        number=max(128, max(w.conversations(c) for c in chain)),
        num_turns=w.turns,
        first=w.context,
        subsequent=w.turn_tokens,
        source="repro plan",
    )
    by_c = {r.parallel: r for r, _ in simulate_points(setup, shape, prof.sweep, gpus=request.gpus)}
    return [_outcome(by_c[c]) for c in chain]


def _outcome(record: Any) -> Outcome:
    client = record.client
    assert client is not None  # the simulator always summarises its client
    return Outcome(
        "simulated",
        metrics={k: _number(record.metrics.get(k)) for k in KEPT_METRICS},
        interval80=dict(record.fidelity.get("interval80") or {}),
        mean_latency_s=client.mean_latency_s,
        requests=client.total_requests,
        failed=client.failed_requests,
        engine_steps=int(record.fidelity.get("engine_steps") or 0),
    )


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and math.isfinite(value)
    return float(value) if ok else None


def evaluate(
    request: PlanRequest, unit: Config, chain: tuple[int, ...], *, use_cache: bool = True
) -> tuple[list[Outcome], bool]:
    """(one outcome per point of `chain`, served from the cache)."""
    key = cache_key(request, unit, chain)
    if use_cache and (hit := read_cached(key)) is not None and len(hit) == len(chain):
        return hit, True
    outcomes = simulate(request, unit, chain)
    write_cached(key, outcomes)
    return outcomes, False
