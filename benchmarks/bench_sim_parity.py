"""CPU parity (issue 12 item 5): fit the step cost on one unpressured real CPU sweep, predict
pressured real sweeps, print predicted beside measured and check the targets.

Targets: pressured occupancy within +-15 % per point; waiting (mean over busy scrapes, max)
and preemptions of the same order ((x + 1) within 3x). The prediction is deterministic: two
predictions of one run give identical point records.

Measure (real server, ~3-6 min each on 2 shared cores), then run this:
  repro sweep --profile cpu-tiny --set 'sweep.points=[[1,2],[4,8]]' --out R --run-id base
  repro sweep --profile cpu-tiny-pressure --set 'sweep.points=[[4,8],[8,16]]' --out R --run-id p16
  repro sweep --profile cpu-tiny --set serve.num-gpu-blocks-override=24 \
      --set serve.max-model-len=2048 --set 'sweep.points=[[4,8],[8,16]]' --out R --run-id p24
  PYTHONPATH=$PWD /work/main/.venv/bin/python benchmarks/bench_sim_parity.py R/base R/p16 R/p24
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from harness.results import load_run
from harness.sim.parity import fit_cpu_cost
from harness.sim.parity_run import format_rows, parity_rows, predict_run, target_misses


def _records(run_dir: Path) -> str:
    run = load_run(run_dir)
    return json.dumps([p.model_dump(mode="json") for p in run.points], sort_keys=True)


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    base, pressured = Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]]
    cost, _ = fit_cpu_cost(base)
    print(f"fit on {base}:")
    print(
        f"  step {cost.step_s * 1e3:.3f} ms + {cost.per_seq_s * 1e3:.3f} ms/decoding request "
        f"+ {cost.per_prefill_token_s * 1e6:.1f} us/prefill token; out of engine "
        f"{cost.overhead_s * 1e3:.0f} ms at c1 + {cost.overhead_per_parallel_s * 1e3:.1f} ms "
        f"per extra worker; re-sent reply +{cost.resent_reply_tokens:.1f} tokens"
    )
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for index, real in enumerate(pressured):
            t0 = time.perf_counter()
            first = predict_run(base, real, Path(tmp) / f"a{index}")
            elapsed = time.perf_counter() - t0
            second = predict_run(base, real, Path(tmp) / f"b{index}")
            same = _records(first) == _records(second)
            rows = parity_rows(real, first)
            misses = target_misses(rows)
            failures += len(misses) + (not same)
            print(f"\n{real} (predicted in {elapsed:.2f} s; deterministic: {same})")
            print(format_rows(rows))
            for miss in misses:
                print(f"  MISS {miss}")
    print("\nall targets met" if not failures else f"\n{failures} target misses")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
