"""Fit the roofline's free parameters to published series; write a calibration file.

Only the series named in `ARMS` (the two MTP3 series of the blog) are targets. The fit is a
bounded Nelder-Mead (scipy) in [0, 1]-normalised parameter space, from docs/simulator.md §5's
starting values, after a coarse scan of the prefill efficiency (the one parameter whose
plausible range spans a decade). Deterministic: same inputs, same file (timestamps aside).
"""

from __future__ import annotations

import hashlib
import math
import subprocess
import time
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from statistics import fmean, pstdev
from typing import Any

import yaml

from harness import __version__
from harness.analysis.metrics import gauge_per_scrape, occupancy_by_phase
from harness.errors import ConfigError
from harness.metric_names import NUM_REQUESTS_RUNNING
from harness.paths import REPO_ROOT
from harness.results import atomic_write_text
from harness.sim.config import CALIBRATION_SCHEMA, setup_from_profile
from harness.sim.cost import FIT_PARAMS, PARAM_MEANING, Roofline
from harness.sim.run import load_workload, simulate_points

PUBLISHED = REPO_ROOT / "launch" / "published" / "glm53-blog.yaml"
# Published series used as targets -> the profile that reproduces its arm.
ARMS = {
    "HiSparse 384 GiB + offloading 128 GiB · MTP3": "hisparse384",
    "Offloading 512 GiB · MTP3": "offload512",
}
TARGET_MODEL, TARGET_GPU = "glm-5.3", "h200"  # what the published figure measured
# Seven bounded parameters (cost.PARAM_MEANING says what each one is). The KV pool is derived as
# vLLM sizes it (config.derived_kv_gib: weights, MTP module, `runtime_gib`, null block). Four
# terms stay fixed because the data cannot tell them from these: the GEMMs' share of FP8 peak in
# prefill (docs/simulator.md §5: ~0.4; a prefill's time at 80K is mostly the top-K row gathers,
# `gather_eff`, and the replicated indexer), the per-step host overhead (constant per step, like
# the kernel floors at small batch), the frontend's time per prompt token (per turn, like prefill
# at c1) and PCIe efficiency (reloads and misses carry the fitted miss rate and block bytes).
# HBM efficiency and the acceptance length nearly trade (a bandwidth-bound step scales with
# 1 / hbm_eff, the tokens it emits with the acceptance length): the bounds of the first pin the
# second to within 1.5x.
FITTED = (
    "hbm_eff",
    "gather_eff",
    "kernel_floor_us",
    "acceptance_length",
    "miss_rate",
    "runtime_gib",
    "host_bytes_scale",
)
MAX_FITTED = 7
# Starting values: docs/simulator.md §5 (0.75 of HBM, acceptance 2.8 as an estimate), gathers at
# a third of the datasheet bandwidth, a 20 us floor per kernel group, 45 % of host-only rows
# missing the hot buffer, an 11.5 GiB runtime reserve (between the roofline's 6 and the
# calculator's 15) and the served fp8_ds_mla block with the MTP layer (config.served_bytes_scale:
# 54,728 / 47,700 B).
START = {
    "hbm_eff": 0.75,
    "gather_eff": 0.33,
    "kernel_floor_us": 20.0,
    "acceptance_length": 2.8,
    "miss_rate": 0.45,
    "runtime_gib": 11.5,
    "host_bytes_scale": 54728 / 47700,
}
# The residency mechanism the fit runs (harness.sim.config.RESIDENCY_MODELS); the file records
# it, and runs with the calibration use the same one.
FIT_RESIDENCY = "vllm-0.32"
# Facts of vLLM 0.32.0 the fit runs with, not free parameters: its API server renders and
# tokenises requests on one thread (config/model.py renderer_num_workers = 1), so turns sent
# together reach the engine one after another (docs/simulator.md §2, §6a).
FIT_FIXED = {"frontend_threads": 1.0}
WEIGHTS = {"occupancy": 2.0, "interactivity": 1.0, "throughput_per_gpu": 1.0}
METRICS = tuple(WEIGHTS)
# Issue 12's acceptance bands (relative error per point), and how steeply leaving one costs: the
# least-squares optimum can trade one point far outside its band for small gains elsewhere.
TOLERANCE = {"occupancy": 0.10, "interactivity": 0.15, "throughput_per_gpu": 0.15}
HINGE = 50.0
# Read-off error of the published values (docs/recipe.md §5): occupancy labels are exact, the Pareto
# coordinates come from SVG pixels, +-0.5 %.
READOFF = {"occupancy": 0.0, "interactivity": 0.005, "throughput_per_gpu": 0.005}
STALLED = 1e6  # loss of parameters under which the simulated engine stalls


@dataclass
class Target:
    profile: str
    series: str
    points: dict[str, dict[str, float]]  # label -> metric -> published value
    dataset: str | None = None  # None: the blog-shaped workload
    overrides: tuple[str, ...] = ()  # profile overrides (tests use reduced sweeps)


def load_targets(path: Path = PUBLISHED) -> list[Target]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    out = []
    for series in data.get("series", []):
        profile = ARMS.get(series.get("name"))
        if profile is None:
            continue
        pts = {p["label"]: {m: float(p[m]) for m in METRICS} for p in series["points"]}
        out.append(Target(profile, series["name"], pts))
    if len(out) != len(ARMS):
        raise ConfigError(f"{path}: expected the series {sorted(ARMS)}")
    return out


def phase_read_occupancy(samples: list[Any], period_s: float) -> tuple[float, float] | None:
    """What a scraper every `period_s` seconds, started at a phase unrelated to the point's,
    reads as occupancy: the mean over its whole-second phases, and the phases' standard
    deviation in log space. `samples` come from a 1 s scrape of the point (docs/simulator.md
    §6a: a c8 point gives a 30 s scrape about 8 samples, so the phase moves the reading)."""
    running = gauge_per_scrape(samples, NUM_REQUESTS_RUNNING)
    readings = [v for v in occupancy_by_phase(running, max(1, round(period_s))).values() if v > 0]
    if not readings:
        return None
    logs = [math.log(v) for v in readings]
    return fmean(readings), pstdev(logs)


def predict(
    profile_name: str,
    params: dict[str, float],
    dataset: str | None = None,
    calibration: Any = None,
    overrides: tuple[str, ...] = (),
) -> dict[str, dict[str, float | None]]:
    """Per point: the simulated metrics, with the occupancy read as the published one was, by a
    scraper of the profile's period at an unknown phase (`phase_read_occupancy`); its phase
    spread is `occupancy_phase_sd`. The engine does not depend on the scrape: the other metrics
    are those of a run at the profile's own period."""
    from harness.serve.profiles import load_profile

    prof = load_profile(profile_name, overrides)
    residency = None if calibration is not None else FIT_RESIDENCY
    if calibration is None:
        params = {**FIT_FIXED, **params}
    setup = setup_from_profile(prof, calibration, params, residency=residency)
    sweep = prof.sweep.model_copy(update={"scrape_interval_s": 1.0})
    res = simulate_points(setup, load_workload(dataset), sweep, gpus=max(prof.gpus, 1))
    out: dict[str, dict[str, float | None]] = {}
    for rec, samples in res:
        metrics: dict[str, float | None] = dict(rec.metrics)
        read = phase_read_occupancy(samples, prof.sweep.scrape_interval_s)
        metrics["occupancy"], metrics["occupancy_phase_sd"] = read or (None, None)
        out[rec.label] = metrics
    return out


def errors(targets: list[Target], params: dict[str, float]) -> list[dict[str, Any]]:
    rows = []
    for target in targets:
        sim = predict(target.profile, params, target.dataset, overrides=target.overrides)
        for label, published in target.points.items():
            for metric, value in published.items():
                got = sim.get(label, {}).get(metric)
                rows.append(
                    {
                        "profile": target.profile,
                        "label": label,
                        "metric": metric,
                        "target": value,
                        "simulated": got,
                        "rel_error": None if got is None else got / value - 1.0,
                        **(
                            {"phase_sd": sim.get(label, {}).get("occupancy_phase_sd")}
                            if metric == "occupancy"
                            else {}
                        ),
                    }
                )
    return rows


def loss(rows: list[dict[str, Any]]) -> float:
    """Weighted squared log errors, plus a steep hinge on every point outside its target band."""
    total = 0.0
    for row in rows:
        got = row["simulated"]
        err = 10.0 if not got or got <= 0 else math.log(got / row["target"])
        band = math.log1p(TOLERANCE[row["metric"]])
        outside = max(0.0, abs(err) - band)
        total += WEIGHTS[row["metric"]] * err * err + HINGE * outside * outside
    return total


def _roofline_defaults() -> dict[str, float]:
    """The roofline's own default of every fittable parameter (a start for those not in START)."""
    return {
        f.name: float(f.default)
        for f in fields(Roofline)
        if f.name in FIT_PARAMS and f.default is not MISSING and f.default is not None
    }


def _scale(x: list[float], names: tuple[str, ...]) -> dict[str, float]:
    out = {}
    for name, v in zip(names, x, strict=True):
        low, high = FIT_PARAMS[name]
        out[name] = float(low + min(1.0, max(0.0, float(v))) * (high - low))
    return out


def _unscale(params: dict[str, float], names: tuple[str, ...]) -> list[float]:
    return [(params[n] - FIT_PARAMS[n][0]) / (FIT_PARAMS[n][1] - FIT_PARAMS[n][0]) for n in names]


def fit(
    targets: list[Target],
    *,
    max_evals: int = 150,
    names: tuple[str, ...] = FITTED,
    start: dict[str, float] | None = None,
    echo: Callable[[str], None] = print,
) -> tuple[dict[str, float], list[dict], int]:
    """Best parameters (rounded), their error rows, and the number of simulated sweeps."""
    from scipy.optimize import minimize

    if len(names) > MAX_FITTED:
        raise ConfigError(
            f"at most {MAX_FITTED} fitted parameters, got {len(names)}: {', '.join(names)}"
        )
    evals = 0
    begin = {**_roofline_defaults(), **(START if start is None else start)}
    best: tuple[float, dict[str, float]] = (math.inf, {n: begin[n] for n in names})

    def objective(x: list[float]) -> float:
        nonlocal evals, best
        params = _scale(list(x), names)
        evals += 1
        try:
            value = loss(errors(targets, params))
        except RuntimeError as exc:  # a stalled engine: these parameters cannot serve the sweep
            echo(f"  eval {evals}: {exc} at " + " ".join(f"{k}={v:.4g}" for k, v in params.items()))
            return STALLED
        if value < best[0]:
            best = (value, params)
            echo(
                f"  eval {evals}: loss {value:.4f} "
                + " ".join(f"{k}={v:.4g}" for k, v in params.items())
            )
        return value

    if (
        start is None and "prefill_eff" in names
    ):  # the widest plausible range: scan it before the simplex
        scan = [
            (objective(_unscale({**begin, "prefill_eff": p}, names)), p) for p in (0.15, 0.25, 0.4)
        ]
        begin["prefill_eff"] = min(scan)[1]
    x0 = _unscale(begin, names)
    simplex = [x0] + [
        [v + (0.12 if i == j else 0.0) for j, v in enumerate(x0)] for i in range(len(x0))
    ]
    simplex = [[min(1.0, max(0.0, v)) for v in row] for row in simplex]
    minimize(
        objective,
        x0,
        method="Nelder-Mead",
        bounds=[(0.0, 1.0)] * len(names),
        options={
            "maxfev": max(1, max_evals - evals),
            "initial_simplex": simplex,
            "xatol": 1e-3,
            "fatol": 1e-4,
        },
    )
    params = {k: round(float(v), 6) for k, v in best[1].items()}
    return params, errors(targets, params), evals


# Why each parameter not fitted has the value it has (written into the calibration file).
FIXED_NOTES = {
    "prefill_eff": "roofline default 0.4 (docs/simulator.md §5: ~40 % of FP8 peak "
    "for the prefill GEMMs)",
    "pcie_eff": "roofline default 0.8 (docs/simulator.md §5: ~50-55 of 64 GB/s for bulk copies)",
    "step_overhead_ms": "roofline default 1.0 (host time per step; estimate)",
    "frontend_us_per_token": "roofline default 4.0 (tokenizer, template, hashing)",
    "frontend_threads": "1: vLLM 0.32.0's API server renders and tokenises on one thread "
    "(config/model.py renderer_num_workers)",
    "copy_submit_us": "roofline default 0.55 (measured per copy descriptor on an H100 host; "
    "docs/simulator.md §6a, Copy submission)",
    "host_bytes_scale": "derived per MTP mode: served fp8_ds_mla rows with the MTP layer / "
    "the calculator's bytes (docs/simulator.md §3)",
    "kv_gib_per_gpu": "derived per GPU and MTP mode: 0.92 x HBM - weights - MTP module "
    "- runtime_gib, null block held back (docs/simulator.md §3)",
}


ALL_ARMS = ("hisparse384", "offload512", "hisparse384-nomtp", "offload512-nomtp")
SENSITIVITY_STEP = 0.05  # finite-difference step in normalised parameter units (5 % of a range)


def sensitivities(
    params: dict[str, float],
    profiles: tuple[str, ...] = ALL_ARMS,
    step: float = SENSITIVITY_STEP,
    overrides: dict[str, tuple[str, ...]] | None = None,
) -> dict[str, dict[str, dict[str, list[float]]]]:
    """d log(metric) / d x_j at `params` for every point of `profiles` (x: the parameter in
    [0, 1]-normalised units), one forward difference per parameter (backward at an upper
    bound): profile -> label -> metric -> gradient over `params`' names, in order."""
    names = tuple(params)
    x0 = _unscale(params, names)
    base = {p: predict(p, params, overrides=(overrides or {}).get(p, ())) for p in profiles}
    out: dict[str, dict[str, dict[str, list[float]]]] = {
        p: {label: {m: [] for m in METRICS} for label in base[p]} for p in profiles
    }
    for j in range(len(names)):
        h = step if x0[j] + step <= 1.0 else -step
        x = list(x0)
        x[j] += h
        moved = _scale(x, names)
        for p in profiles:
            sim = predict(p, moved, overrides=(overrides or {}).get(p, ()))
            for label, metrics in base[p].items():
                for m in METRICS:
                    a, b = metrics.get(m), sim.get(label, {}).get(m)
                    ok = a is not None and b is not None and a > 0 and b > 0
                    out[p][label][m].append(math.log(b / a) / h if ok else 0.0)  # type: ignore[operator]  # ok: both are positive numbers
    return out


def residual_sigmas(rows: list[dict[str, Any]], n_params: int) -> dict[str, float]:
    """Log-space model error per metric: the fit's residual standard error (its mean squared
    log error, scaled by n / (n - p) for the parameters it fitted) with the read-off error of
    the published values in quadrature. For occupancy also the scrape phase's spread (mean
    square of the rows' `phase_sd`): the fit compares the phase mean, but a run reads one phase."""
    n = sum(1 for r in rows if r["simulated"])
    dof = n / max(1, n - n_params)
    out = {}
    for metric in METRICS:
        mine = [r for r in rows if r["metric"] == metric and r["simulated"]]
        if not mine:
            continue
        errs = [math.log(r["simulated"] / r["target"]) for r in mine]
        mse = sum(e * e for e in errs) / len(errs) * dof
        phase = sum((r.get("phase_sd") or 0.0) ** 2 for r in mine) / len(mine)
        out[metric] = math.sqrt(mse + READOFF[metric] ** 2 + phase)
    return out


def parameter_covariance(
    rows: list[dict[str, Any]],
    grads: dict[str, dict[str, dict[str, list[float]]]],
    sigma: dict[str, float],
) -> list[list[float]]:
    """Covariance of the normalised parameters from the fit (Gauss-Newton / delta method):
    (J^T W J)^+ with J the published points' log-metric gradients and W = 1 / sigma_metric^2
    (each point's residual variance). This is what a residual bootstrap over the published
    points converges to for a locally linear model; directions the points do not inform get
    no variance (pseudo-inverse), and they do not move the fitted points either."""
    import numpy as np

    jac, weights = [], []
    for r in rows:
        g = grads.get(r["profile"], {}).get(r["label"], {}).get(r["metric"])
        if g is None or not r["simulated"] or sigma.get(r["metric"], 0) <= 0:
            continue
        jac.append(g)
        weights.append(1.0 / sigma[r["metric"]] ** 2)
    if not jac:  # no informative point: no parameter variance to carry
        size = len(next(iter(next(iter(next(iter(grads.values())).values())).values())))
        return [[0.0] * size for _ in range(size)]
    j = np.array(jac)
    info = j.T @ (j * np.array(weights)[:, None])
    return [[float(v) for v in row] for row in np.linalg.pinv(info, rcond=1e-10)]


def interval_sigmas(
    rows: list[dict[str, Any]],
    names: tuple[str, ...],
    grads: dict[str, dict[str, dict[str, list[float]]]] | None = None,
) -> dict[str, Any]:
    """Log-space sigma of the 80 % prediction interval, per metric and per arm.

    A new measurement of a point = the simulated value x the model's error: its log variance is
    the parameters' uncertainty carried through that point's gradient (g C g^T, C from
    `parameter_covariance`) plus the residual variance the parameters could not explain
    (`residual_sigmas`). Per arm and metric the point variances are averaged; `sigma_log`
    (the median over the arms) serves profiles the calibration has no gradients for.
    """
    resid = residual_sigmas(rows, len(names))
    out: dict[str, Any] = {"sigma_log": {k: round(v, 5) for k, v in resid.items()}}
    if not grads:
        return out
    cov = parameter_covariance(rows, grads, resid)
    by_arm: dict[str, dict[str, float]] = {}
    for arm, points in grads.items():
        by_arm[arm] = {}
        for metric in METRICS:
            if metric not in resid:
                continue
            var = [
                sum(
                    gi * cov[i][k] * gk
                    for i, gi in enumerate(g[metric])
                    for k, gk in enumerate(g[metric])
                )
                for g in points.values()
            ]
            by_arm[arm][metric] = round(math.sqrt(sum(var) / len(var) + resid[metric] ** 2), 5)
    out["sigma_log_by_profile"] = by_arm
    out["sigma_log"] = {
        m: round(sorted(a[m] for a in by_arm.values())[len(by_arm) // 2], 5) for m in resid
    }
    out["parameter_sd"] = {
        name: round(math.sqrt(max(0.0, cov[i][i])) * (FIT_PARAMS[name][1] - FIT_PARAMS[name][0]), 6)
        for i, name in enumerate(names)
    }
    return out


def _start_info(start: Path | None) -> Any:
    if start is None:
        return {
            "from": "docs/simulator.md §3/§5 values (START), prefill_eff scanned",
            "params": START,
        }
    return {"from": str(start), "params": yaml.safe_load(start.read_text("utf-8"))["params"]}


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"],
            capture_output=True,
            check=False,
            text=True,
            timeout=10,
        )
    except OSError:
        return None
    return out.stdout.strip() or None


def complete_params(params: dict[str, float]) -> dict[str, float]:
    """The fitted parameters plus the fixed ones at the values the fit ran with (the roofline's
    defaults), so that the file states every value a run applies."""
    fixed = {k: v for k, v in {**_roofline_defaults(), **FIT_FIXED}.items() if k not in params}
    fixed.pop("host_bytes_scale", None)  # when not fitted: derived (config.served_bytes_scale)
    return {**params, **dict(sorted(fixed.items()))}


def write_calibration(
    path: Path,
    params: dict[str, float],
    rows: list[dict],
    evals: int,
    published: Path = PUBLISHED,
    start: Path | None = None,
    grads: dict[str, dict[str, dict[str, list[float]]]] | None = None,
) -> None:
    """`grads`: the points' parameter gradients (`sensitivities`); computed here (one sweep of
    the four arms per fitted parameter) when not given."""
    if grads is None:
        grads = sensitivities(params)
    data = {
        "schema": CALIBRATION_SCHEMA,
        "model": TARGET_MODEL,
        "gpu": TARGET_GPU,
        "residency": FIT_RESIDENCY,
        "params": complete_params(params),
        "fitted": list(params),
        "bounds": {k: list(FIT_PARAMS[k]) for k in complete_params(params)},
        "meaning": {k: PARAM_MEANING[k] for k in complete_params(params)},
        "intervals": {
            "level": 0.8,
            "z": 1.2816,
            "method": "value x exp(+-z sigma_log); sigma_log^2 = g C g^T + s^2: C the fitted "
            "parameters' covariance (Gauss-Newton, (J^T W J)^+ over the published points, "
            "W = 1 / s^2), g the point's log-metric gradient (forward differences of "
            f"{SENSITIVITY_STEP:g} of each range), s the fit's residual standard error per "
            "metric (n / (n - p) scaled, read-off error and, for occupancy, the 30 s scrape's "
            "phase spread in quadrature); averaged per arm",
            **interval_sigmas(rows, tuple(params), grads),
        },
        "fixed": {k: v for k, v in FIXED_NOTES.items() if k not in params},
        "predictions": {
            "acceptance_length": "fitted on the MTP3 series only: check it against the GPU "
            "day's vllm:spec_decode counters (1 + accepted / drafts)",
        },
        "provenance": {
            "fitted_to": str(published.relative_to(REPO_ROOT)),
            "fitted_to_sha256": hashlib.sha256(published.read_bytes()).hexdigest(),
            "series": {v: k for k, v in ARMS.items()},
            "workload": "blog-shaped token counts (docs/recipe.md §6)",
            "optimiser": "scipy.optimize.minimize Nelder-Mead, bounded, normalised",
            "occupancy_read": "the mean over the 30 whole-second phases of what a 30 s scrape "
            "reads (the published occupancy is one such reading at an unknown phase); the "
            "phases' spread is in the occupancy interval",
            "loss": "sum of w x log(simulated / published)^2, w = "
            + ", ".join(f"{k} {v}" for k, v in WEIGHTS.items())
            + f"; plus {HINGE:g} x (|log error| - log(1 + band))^2 outside the bands "
            + ", ".join(f"{k} {v:.0%}" for k, v in TOLERANCE.items()),
            "evaluations": evals,
            "start": _start_info(start),
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "harness_version": __version__,
            "git_commit": _git_commit(),
        },
        "errors": [
            {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()} for r in rows
        ],
    }
    # temp file + rename (harness/results.py): an interrupted or failed write never leaves half
    # a calibration where `repro simulate` would read it
    atomic_write_text(path, yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
