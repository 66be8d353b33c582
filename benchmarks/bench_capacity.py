"""How fast `repro capacity` answers: CLI wall time (fresh process) and in-process evaluation.

Run: /work/scratch/hv/bin/python benchmarks/bench_capacity.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time


def cli_wall(args: list[str], repeats: int = 5) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", "from harness.cli import main; main()", *args],
            check=True,
            capture_output=True,
        )
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    baseline = cli_wall(["--help"])
    done = cli_wall(["capacity", "--gpu", "h200", "--tp", "8", "--seq-len", "142000"])
    print(f"repro --help (CLI start-up)                 median {statistics.median(baseline):.3f} s")
    print(
        f"repro capacity --gpu h200 --tp 8 --seq-len 142000  median "
        f"{statistics.median(done):.3f} s  (min {min(done):.3f} s)"
    )

    from harness.capacity.formulas import CHART_SEQ_LENS, chart_curve, evaluate, make_deployment

    dep = make_deployment(spec_tokens=3)
    start = time.perf_counter()
    evaluate(dep, 142000)
    one = time.perf_counter() - start
    start = time.perf_counter()
    chart_curve(dep, dep.hot_rows, CHART_SEQ_LENS)
    curve = time.perf_counter() - start
    print(f"evaluate(142,000) in process               {one * 1e3:.2f} ms")
    print(f"chart curve, {len(CHART_SEQ_LENS)} lengths            {curve * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
