"""The blog's four GLM arms on CPU through the whole pipeline: `repro sweep --engine sim` at the
blog's points on the blog-shaped offline dataset (128 x 13 turns), then figures, claims, compare
and the report. Prints wall time and peak RSS (largest single process) per arm.

Run: PYTHONPATH=$PWD /work/main/.venv/bin/python benchmarks/bench_blog_arms.py OUT_DIR [K]
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

ARMS = ("hisparse384", "offload512", "hisparse384-nomtp", "offload512-nomtp")
REPRO = [sys.executable, "-c", "from harness.cli import main; main()"]


def run_arm(arm: str, out: Path, k: str, port: int) -> tuple[float, int, int]:
    cmd = [
        "/usr/bin/time",
        "-v",
        *REPRO,
        "sweep",
        "--profile",
        arm,
        "--engine",
        "sim",
        "--time-scale",
        k,
        "--dataset",
        "openhands-offline",
        "--out",
        str(out),
        "--run-id",
        f"cpu-{arm}",
        "--port",
        str(port),
    ]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    wall = time.monotonic() - t0
    (out / f"cpu-{arm}.log").write_text(proc.stdout + proc.stderr)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    return wall, int(rss.group(1)) if rss else -1, proc.returncode


def main() -> None:
    out = Path(sys.argv[1])
    k = sys.argv[2] if len(sys.argv) > 2 else "4"
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, arm in enumerate(ARMS):
        wall, rss, code = run_arm(arm, out, k, 18600 + i)
        rows.append((arm, wall, rss, code))
        print(
            f"{arm:18} exit {code}  wall {wall:7.1f} s  peak RSS {rss / 1024:7.1f} MiB", flush=True
        )
    runs = [str(out / f"cpu-{arm}") for arm in ARMS]
    for args in (
        ["claims", "check", *runs[:2]],
        ["claims", "check", *runs],
        ["compare", runs[1], runs[0]],
        ["report", *runs, "--out", str(out / "report.html")],
    ):
        proc = subprocess.run([*REPRO, *args], check=False, capture_output=True, text=True)
        (out / f"{args[0]}.txt").write_text(proc.stdout + proc.stderr)
        print(
            f"$ repro {' '.join(args)}  (exit {proc.returncode})\n{proc.stdout[-3000:]}"
            f"{proc.stderr[-1500:]}",
            flush=True,
        )


if __name__ == "__main__":
    main()
