"""What the blog did not run: agents that pause between turns, on the simulated engine.

Think time 0 / 5 / 30 / 120 s (exponential, seeded) x the two MTP3 arms (hisparse384,
offload512) x c8-c64 on the blog-shaped workload (128 conversations x 13 turns, 74,160 + 753
tokens, 220-token replies), objectives ttft=2s,tpot=70ms. Prints, per arm and pause: occupancy,
median TTFT of turns >= 2, p90 TTFT, goodput and attainment per point, and the highest
concurrency meeting the objectives for >= 90 % of requests; writes every run under OUT, the
study's figure (occupancy, TTFT by turn at c32 and goodput per arm and think time,
harness/report/think_time.py) as HTML and, when kaleido and a Chromium are there, PNG, and one
dashboard that shows it beside the per-turn figures, TTFT CDFs and KV transfer of all runs.

These are simulator predictions, to be tested on the GPU day, not measurements.

Run: PYTHONPATH=$PWD /work/main/.venv/bin/python benchmarks/think_time_study.py [OUT] [CALIBRATION]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from harness.analysis.goodput import max_concurrency_meeting
from harness.analysis.point_table import point_table
from harness.paths import REPO_ROOT
from harness.report.dashboard import write_report
from harness.report.images import ExportError, export_figures
from harness.report.think_time import think_time_figure
from harness.results import load_run
from harness.sim.run import run_simulation

ARMS = ("hisparse384", "offload512")
PAUSES_S = (0, 5, 30, 120)
POINTS = "[[8,16],[16,32],[32,64],[64,128]]"
SLO = "ttft=2s,tpot=70ms"
DEFAULT_CAL = REPO_ROOT / "launch" / "calibrations" / "glm53-h200.yaml"


def think(pause: int) -> str:
    if not pause:
        return "sweep.think_time={kind: none}"
    return f"sweep.think_time={{kind: exponential, mean_s: {pause}, seed: 1, max_s: {6 * pause}}}"


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/think-time-study")
    cal = (
        Path(sys.argv[2]) if len(sys.argv) > 2 else (DEFAULT_CAL if DEFAULT_CAL.exists() else None)
    )
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    runs = []
    start = time.perf_counter()
    for arm in ARMS:
        for pause in PAUSES_S:
            t0 = time.perf_counter()
            run_dir = run_simulation(
                arm,
                calibration=cal,
                overrides=[f"sweep.points={POINTS}", think(pause), f"sweep.slo={SLO}"],
                out=out,
                run_id=f"{arm}-think{pause}-{stamp}",
            )
            runs.append(run_dir)
            run = load_run(run_dir)
            best = max_concurrency_meeting(run.points)
            print(f"{arm} think {pause:>3} s ({time.perf_counter() - t0:5.1f} s): "
                  f"highest c meeting {SLO} for >= 90 %: {best}")  # fmt: skip
            for p in run.points:
                table = point_table(run.root, p.point_id)
                assert table is not None  # the simulator always keeps the table
                later = table[(table["turn"] > 1) & table["success"]]
                m = p.metrics
                print(
                    f"    {p.label:>4}  occupancy {m.get('occupancy') or 0:6.2f}  "
                    f"TTFT turn>=2 median {later['ttft_s'].median() * 1000:8.1f} ms  "
                    f"p90 {m.get('p90_ttft_ms') or 0:8.1f} ms  "
                    f"goodput {m.get('goodput_rps') or 0:6.3f} req/s  "
                    f"attainment {m.get('slo_attainment') or 0:5.1%}  "
                    f"offload loads {m.get('offload_load_gib') or 0:8.1f} GiB  "
                    f"HiSparse h2d {m.get('hisparse_h2d_gib') or 0:8.1f} GiB"
                )
    page = write_report(
        runs, out=out / f"think-time-study-{stamp}.html", title="Think-time study (simulated)"
    )
    figure = think_time_figure([load_run(r) for r in runs], title="Think-time study (simulated)")
    assert figure is not None  # four think times per arm
    stem = out / f"think-time-study-{stamp}-figure"
    written = export_figures([(figure, stem.with_suffix(".html"))])
    try:
        written += export_figures([(figure, stem.with_suffix(".png"))])
    except ExportError as exc:
        print(f"no static image: {exc}")
    print(f"figure {', '.join(str(p) for p in written)}")
    print(f"total {time.perf_counter() - start:.1f} s; dashboard {page}")


if __name__ == "__main__":
    main()
