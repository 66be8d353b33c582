"""What a 30 s scrape of unknown phase reads as occupancy, per simulated point (issue 24).

The published occupancies are means of the non-zero `vllm:num_requests_running` samples of a
30 s scrape. A c8 point lasts ~250 s, so it gives about 8 samples, and where they fall decides
the mean. This simulates each arm once with a 1 s scrape (the engine does not depend on the
scrape), then reads it as a 30 s scraper starting at each of the 30 whole-second phases would.
Printed per point: the time-weighted mean (1 s samples), the 30 s reading at phase 0 (what an
offline run at the blog's period reports: its first scrape is at the point's start), the 30 s
readings' min / median / max over the phases, and the 30 s samples per point.

Run: PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_scrape_phase.py [CALIBRATION] [ARM ...]
(default: the shipped calibration and the two MTP3 arms)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from harness.analysis.metrics import gauge_per_scrape, occupancy_by_phase
from harness.metric_names import NUM_REQUESTS_RUNNING
from harness.paths import REPO_ROOT
from harness.serve.profiles import load_profile
from harness.sim.config import load_calibration, setup_from_profile
from harness.sim.run import load_workload, simulate_points

PERIOD_S = 30  # the blog's scrape period
DEFAULT = REPO_ROOT / "launch" / "calibrations" / "glm53-h200.yaml"


@dataclass(frozen=True)
class PhaseReadings:
    time_weighted: float | None  # the mean over the 1 s samples that saw a running request
    by_phase: dict[int, float]  # the 30 s reading at each whole-second phase
    samples_per_phase: int

    @property
    def spread(self) -> tuple[float, float, float]:
        values = list(self.by_phase.values())
        return min(values), median(values), max(values)


def phase_readings(arm: str, calibration: Path | None) -> dict[str, PhaseReadings]:
    """Per point label of the arm's sweep: its occupancy read at every 30 s phase."""
    prof = load_profile(arm)
    setup = setup_from_profile(prof, load_calibration(calibration) if calibration else None)
    sweep = prof.sweep.model_copy(update={"scrape_interval_s": 1.0})
    out = {}
    for record, samples in simulate_points(setup, load_workload(None), sweep, gpus=prof.gpus):
        running = gauge_per_scrape(samples, NUM_REQUESTS_RUNNING)
        whole = occupancy_by_phase(running, 1)
        out[record.label] = PhaseReadings(
            whole.get(0), occupancy_by_phase(running, PERIOD_S), len(running) // PERIOD_S
        )
    return out


def main(args: list[str]) -> None:
    calibration = Path(args.pop(0)) if args and args[0].endswith(".yaml") else DEFAULT
    arms = args or ["hisparse384", "offload512"]
    print(f"calibration: {calibration}")
    print(
        f"{'arm':18s} {'point':5s} {'1 s mean':>8s}   30 s: {'phase 0':>7s} {'min':>6s} "
        f"{'median':>6s} {'max':>6s}  samples"
    )
    for arm in arms:
        for label, r in phase_readings(arm, calibration).items():
            low, mid, high = r.spread
            print(
                f"{arm:18s} {label:5s} {r.time_weighted or 0:8.2f}         "
                f"{r.by_phase.get(0, float('nan')):7.2f} {low:6.2f} {mid:6.2f} {high:6.2f}  "
                f"{r.samples_per_phase}"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
