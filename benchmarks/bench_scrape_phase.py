"""What a 30 s scrape of unknown phase reads as occupancy, per simulated point (issue 24).

The published occupancies are means of the non-zero `vllm:num_requests_running` samples of a
30 s scrape. A c8 point lasts ~250 s, so it gives about 8 samples, and where they fall decides
the mean. This simulates each arm once with a 1 s scrape (the engine does not depend on the
scrape), then reads it as a 30 s scraper starting at each of the 30 whole-second phases would.
Printed per point: the time-weighted mean (1 s samples), the 30 s reading at phase 0 (what an
offline run at the blog's period reports: its first scrape is at the point's start), the 30 s
readings' min / median / max over the phases, and the 30 s samples per point.

Run: PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_scrape_phase.py [ARM ...]
(default: the two MTP3 arms; the calibration the profile selects)
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from statistics import median

import pandas as pd

from harness.metric_names import NUM_REQUESTS_RUNNING
from harness.results import RunLayout, load_run
from harness.sim.run import run_simulation

PERIOD_S = 30  # the blog's scrape period


def running_per_second(samples_csv: Path) -> pd.Series:
    samples = pd.read_csv(samples_csv, converters={"timestamp": float})
    rows = samples[samples["name"] == NUM_REQUESTS_RUNNING]
    return rows.groupby("timestamp")["value"].sum().sort_index()


def readings_by_phase(running: pd.Series) -> dict[int, float]:
    """The occupancy (mean of non-zero samples) a PERIOD_S scraper reads at each phase (s)."""
    seconds = (running.index - running.index[0]).to_numpy().round().astype(int)
    out = {}
    for phase in range(PERIOD_S):
        seen = running[seconds % PERIOD_S == phase]
        nonzero = seen[seen > 0]
        if len(nonzero):
            out[phase] = float(nonzero.mean())
    return out


def main(arms: list[str]) -> None:
    out = Path(tempfile.mkdtemp(prefix="scrape-phase-"))
    print(
        f"{'arm':18s} {'point':5s} {'1 s mean':>8s}   30 s: {'phase 0':>7s} {'min':>6s} "
        f"{'median':>6s} {'max':>6s}  samples"
    )
    for arm in arms:
        run_dir = run_simulation(arm, overrides=["sweep.scrape_interval_s=1"], out=out, run_id=arm)
        for point in load_run(run_dir).points:
            running = running_per_second(RunLayout(run_dir).samples_csv(point.point_id))
            nonzero = running[running > 0]
            phases = readings_by_phase(running)
            values = list(phases.values())
            print(
                f"{arm:18s} {point.label:5s} {nonzero.mean():8.2f}         "
                f"{phases.get(0, float('nan')):7.2f} {min(values):6.2f} {median(values):6.2f} "
                f"{max(values):6.2f}  {len(running) // PERIOD_S}"
            )


if __name__ == "__main__":
    main(sys.argv[1:] or ["hisparse384", "offload512"])
