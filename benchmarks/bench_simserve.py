"""The same workload through HTTP (EvalScope -> `repro sim serve`) and offline (`repro simulate`).

Target: at the default time scale K, occupancy and interactivity agree within +-10 % at every
point (the client is not the bottleneck). Prints both side by side, the deviations, wall times,
and the HTTP run's client TPOT x K against the server's own TPOT histogram (a load-dependent
band, so it is measured here and not asserted in the gating tests).

Run: PYTHONPATH=$PWD /work/main/.venv/bin/python benchmarks/bench_simserve.py \
        [--profile hisparse384] [--time-scale K] [--points c1,c8,...] [--dataset D] [--set K=V]
        [--keep DIR]
The blog's 30 s scrape leaves 2-9 samples per point, so occupancy is a mean of very few samples;
`--set sweep.scrape_interval_s=5` compares the two paths with enough samples to mean something.
(default dataset: the blog-shaped openhands-offline recipe, built on first use).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from harness.results import load_run
from harness.run.sweep import SweepRequest, run_sweep
from harness.serve.server import free_port
from harness.sim.run import run_simulation
from harness.sim.serve.server import DEFAULT_TIME_SCALE, SIM_DEFAULT_DATASET

KEYS = ("occupancy", "interactivity", "throughput_per_gpu", "mean_ttft_ms")


def compare(
    profile: str,
    k: float,
    points: list[str] | None,
    dataset: str,
    out: Path,
    overrides: tuple[str, ...] = (),
) -> list[dict]:
    t0 = time.perf_counter()
    http = run_sweep(
        SweepRequest(
            profile=profile,
            engine="sim",
            time_scale=k,
            dataset=dataset,
            overrides=overrides,
            only_points=points,
            out=out,
            run_id=f"http-{profile}",
            port=free_port(),
        ),
        echo=lambda _m: None,
    )
    t_http = time.perf_counter() - t0
    t0 = time.perf_counter()
    offline = run_simulation(
        profile,
        dataset=dataset,
        overrides=overrides,
        points=points,
        out=out,
        run_id=f"offline-{profile}",
    )
    t_off = time.perf_counter() - t0
    a = {p.label: p for p in load_run(http).points}
    b = {p.label: p for p in load_run(offline).points}
    rows = []
    for label, pa in a.items():
        pb = b[label]
        row = {"point": label, "valid": pa.valid}
        for key in KEYS:
            x, y = pa.metrics.get(key), pb.metrics.get(key)
            row[key] = (x, y, (x / y - 1.0) if x is not None and y else None)
        # over HTTP alone: the client's TPOT x K against the server's own (virtual) histogram
        x, y = pa.metrics.get("mean_tpot_ms"), pa.metrics.get("server_tpot_ms")
        row["client_tpot"] = (x, y, (x / y - 1.0) if x is not None and y else None)
        rows.append(row)
    print(f"{profile} K={k:g}: HTTP sweep {t_http:.0f} s wall, offline {t_off:.1f} s")
    return rows


def show(rows: list[dict]) -> None:
    head = "".join(f"{k[:14]:>28}" for k in KEYS)
    print(f"{'point':6}{head}\n{'':6}" + "   http / offline / dev" * len(KEYS))
    for row in rows:
        cells = ""
        for key in KEYS:
            x, y, d = row[key]
            cells += f"{x:9.1f} {y:9.1f} {100 * d:+6.1f}%" if d is not None else f"{'-':>26}"
            cells += "  "
        print(f"{row['point']:6}{cells}")
    for row in rows:
        x, y, d = row["client_tpot"]
        if d is not None:
            print(
                f"{row['point']:6}HTTP TPOT, client x K / server: {x:.2f} / {y:.2f} ms ({100 * d:+.1f}%)"
            )
    worst = max(abs(row[k][2]) for row in rows for k in KEYS[:2] if row[k][2] is not None)
    print(f"worst occupancy/interactivity deviation: {100 * worst:.1f}% (target <= 10%)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="hisparse384")
    ap.add_argument("--time-scale", type=float, default=DEFAULT_TIME_SCALE)
    ap.add_argument("--points", default=None)
    ap.add_argument("--dataset", default=SIM_DEFAULT_DATASET)
    ap.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        help="profile override for both runs, e.g. sweep.scrape_interval_s=5",
    )
    ap.add_argument(
        "--keep", type=Path, help="write both runs under this directory (default: a temporary one)"
    )
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    points = [args.points] if args.points else None
    with tempfile.TemporaryDirectory(prefix="bench-simserve-") as tmp:
        out = args.keep or Path(tmp)
        rows = compare(
            args.profile, args.time_scale, points, args.dataset, out, tuple(args.overrides)
        )
        show(rows)


if __name__ == "__main__":
    main()
