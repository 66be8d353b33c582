"""CPU parity, widened (issue 24 item 7): 3 pool sizes x 2 concurrencies x 3 repeats.

Measures real CPU vLLM sweeps under pressure (`--set serve.num-gpu-blocks-override=N`), fits
the step cost on one unpressured sweep, predicts each pressured sweep and checks, per pool size
and concurrency, against the mean over the repeats:
- occupancy within +-15 %, and an error below half the static bound's,
  min(concurrency, pool / blocks per request);
- preemptions within +-50 % (when the real runs preempt at all).
The CPU build has no native OffloadingConnector (CUDA/ROCm/XPU only), so there is no pressured
offloading arm here. Real runs take minutes each: run this on a quiet machine, not in CI.

Run:  PYTHONPATH=$PWD /work/main/.venv/bin/python benchmarks/bench_sim_parity_wide.py OUT
      [--pools 16,24,32] [--repeats 3] [--smoke]   (--smoke: one pool, one repeat, c2 only)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from statistics import mean

from harness.sim.parity_run import parity_rows, predict_run

POINTS = "sweep.points=[[4,8],[8,16]]"
SMOKE_POINTS = "sweep.points=[[2,2]]"


def sweep(out: Path, run_id: str, *sets: str) -> Path:
    run = out / run_id
    if not run.exists():  # resumable: a finished run is reused, never overwritten
        args = [
            str(Path(sys.executable).with_name("repro")),
            "sweep",
            "--profile",
            "cpu-tiny",
            "--out",
            str(out),
            "--run-id",
            run_id,
        ]
        for item in sets:
            args += ["--set", item]
        subprocess.run(args, check=True)
    return run


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--pools", default="16,24,32")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", action="store_true")
    opts = ap.parse_args()
    pools = [int(p) for p in opts.pools.split(",")]
    repeats, points = opts.repeats, POINTS
    if opts.smoke:
        pools, repeats, points = pools[:1], 1, SMOKE_POINTS
    opts.out.mkdir(parents=True, exist_ok=True)
    base = sweep(opts.out, "base", "sweep.points=[[1,2],[4,8]]")
    cells: dict[tuple[int, str], list] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        for pool in pools:
            for rep in range(repeats):
                real = sweep(
                    opts.out,
                    f"p{pool}-r{rep}",
                    f"serve.num-gpu-blocks-override={pool}",
                    # the smallest pool's 16 blocks x 128 tokens, less vLLM's null block
                    "serve.max-model-len=1920",
                    points,
                )
                sim = predict_run(base, real, Path(tmp) / f"p{pool}-r{rep}")
                for row in parity_rows(real, sim):
                    cells[(pool, row.label)].append(row)
    failures = 0
    print(f"{'pool':>4} {'point':>5} {'meas':>6} {'pred':>6} {'err':>6} {'static':>6} "
          f"{'s.err':>6} {'preempt meas/pred':>18}")  # fmt: skip
    for (pool, label), rows in sorted(cells.items()):
        parallel = int(label.lstrip("c"))
        meas = mean(r.measured["occupancy"] or 0.0 for r in rows)
        pred = mean(r.predicted["occupancy"] or 0.0 for r in rows)
        static = min(parallel, rows[0].static_limit or parallel)
        err, s_err = pred / meas - 1 if meas else 0.0, static / meas - 1 if meas else 0.0
        pm = mean(r.measured["preemptions"] or 0.0 for r in rows)
        pp = mean(r.predicted["preemptions"] or 0.0 for r in rows)
        ok = abs(err) <= 0.15 and abs(err) < 0.5 * abs(s_err) if s_err else abs(err) <= 0.15
        ok = ok and (pm == 0 or abs(pp / pm - 1) <= 0.5)
        failures += not ok
        print(f"{pool:4d} {label:>5} {meas:6.2f} {pred:6.2f} {100 * err:+5.0f}% {static:6d} "
              f"{100 * s_err:+5.0f}% {pm:8.1f}/{pp:<8.1f}{'' if ok else '  MISSES TARGET'}")  # fmt: skip
    print(f"cells outside the targets: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
