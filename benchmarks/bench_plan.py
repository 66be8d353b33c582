"""`repro plan` speed (issue 25, item 5): the blog's plan, cold and warm.

GLM-5.3 on 8xH200 (TP8), the blog's workload (13 turns, 74,160 + 753 tokens, 220-token replies),
`--slo tpot=70ms`, the default grid (2 arms x 4 host pools x 5 max-num-seqs x 5 concurrencies
= 200 configurations), 2 worker processes. Runs the command from an empty cache (cold), then
again (warm), and prints wall time, CPU time of the command, the load average and the plan's
own counts. Target: cold under 2 minutes on 2 cores.

Run: PYTHONPATH=$PWD /work/main/.venv/bin/python benchmarks/bench_plan.py [--keep]
(--keep leaves the cache folder and prints its path)
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPRO = Path(sys.executable).parent / "repro"
COMMAND = ["plan", "--model", "glm-5.3", "--gpu", "h200", "--tp", "8", "--slo", "tpot=70ms",
           "--format", "json"]  # fmt: skip
TARGET_S = 120.0


def timed(cache: Path) -> tuple[float, float, dict]:
    env = {**os.environ, "REPRO_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [str(REPRO), *COMMAND], env=env, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"repro plan failed ({done.returncode}): {done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(done.stdout)


def main() -> None:
    keep = "--keep" in sys.argv[1:]
    folder = Path(tempfile.mkdtemp(prefix="bench-plan-"))
    print(f"repro {' '.join(COMMAND)}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
          f"{os.cpu_count()} CPUs")  # fmt: skip
    for label in ("cold", "warm"):
        wall, cpu, record = timed(folder / "cache")
        n = record["counts"]
        best = record["ranked"][0]["config"] if record["ranked"] else None
        verdict = "" if label == "warm" else (" (target < 120 s: " +
                  ("met" if wall < TARGET_S else "MISSED") + ")")  # fmt: skip
        print(
            f"{label}: {wall:6.1f} s wall, {cpu:6.1f} s CPU{verdict}; "
            f"{n['configurations']} configurations, {n['simulated_sweeps']} sweeps simulated, "
            f"{n['cached_sweeps']} cached, {n['shared']} shared, {n['pruned']} pruned; "
            f"load average now {os.getloadavg()[0]:.2f}; best {best}"
        )
    if keep:
        print(f"cache kept in {folder}")
    else:
        subprocess.run(["rm", "-rf", str(folder)], check=False)


if __name__ == "__main__":
    main()
