"""Simulator vs `repro capacity` (issue 24 item 6): occupancy well above capacity on H200, B200
and B300, with only the GPU facts changed (the H200 calibration's step cost, no refit; the KV
pool from the capacity model for each GPU, as `repro capacity` computes it).

Workload: 8-turn conversations whose context grows from 76,000 to ~83,000 tokens (the static
limit is the calculator's at 80,000: baseline for offloading, HiSparse for HiSparse; no MTP,
whose hot buffer the calculator's default already assumes; the 384 GiB HiSparse host pool in the
served layout), with twice the static limit of
clients (at most 300; max-num-seqs is 256): every arm is memory-bound.

Run: PYTHONPATH=$PWD /work/main/.venv/bin/python benchmarks/bench_sim_capacity.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from harness.capacity.deployment import make_deployment
from harness.capacity.formulas import capacity_at
from harness.serve.profiles import load_profile
from harness.sim.config import load_calibration, setup_from_profile
from harness.sim.run import load_workload, simulate_points

CALIBRATION = Path(__file__).resolve().parents[1] / "launch" / "calibrations" / "glm53-h200.yaml"
CONTEXT = 80_000
ARMS = {"offload512-nomtp": "baseline_limit", "hisparse384-nomtp": "hisparse_limit"}


def sets(clients: int) -> list[str]:
    return [f"sweep.points=[[{clients},{clients}]]", "sweep.dataset_offset=0"]


def main() -> None:
    params = {
        k: v for k, v in load_calibration(CALIBRATION).params.items() if k != "kv_gib_per_gpu"
    }
    with tempfile.TemporaryDirectory() as tmp:
        recipe = Path(tmp) / "fixed.yaml"
        recipe.write_text(
            "number: 300\nnum_turns: 8\nfirst_turn_length: 76000\nsubsequent_turn_length: 753\n",
            encoding="utf-8",
        )
        workload = load_workload(str(recipe))
        print(f"{'gpu':5} {'arm':18} {'static':>6} {'simulated':>9} {'error':>7}")
        for gpu in ("h200", "b200", "b300"):
            for arm, limit in ARMS.items():
                probe = setup_from_profile(load_profile(arm), None, params, gpu=gpu)
                dep = make_deployment(probe.model, gpu=gpu, tp=probe.tp, max_seqs=256)
                # the host pool in the served layout, as the simulator holds it (host_bytes_scale)
                host = 384 / probe.roofline.host_bytes_scale
                lim = capacity_at(dep, CONTEXT, probe.facts["hot_rows"], host_gib=host)
                static = min(256, int(getattr(lim, limit)))
                prof = load_profile(arm, sets(min(300, 2 * static)))
                setup = setup_from_profile(prof, None, params, gpu=gpu)
                ((rec, _),) = simulate_points(setup, workload, prof.sweep, gpus=prof.gpus)
                occ = rec.metrics["occupancy"] or 0.0
                print(f"{gpu:5} {arm:18} {static:6d} {occ:9.2f} {100 * (occ / static - 1):+6.1f}%")


if __name__ == "__main__":
    main()
