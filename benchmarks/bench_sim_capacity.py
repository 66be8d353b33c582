"""Simulator vs `repro capacity` as shipped (issue 24 item 6): occupancy well above capacity on
H200, B200 and B300, with only the GPU facts changed (the H200 calibration, no refit).

Per GPU and arm (no MTP, whose hot buffer the calculator's default assumes):
* `shipped`: `repro capacity --gpu G --seq-len 80000` with the arm's topology (max-num-seqs 256,
  and for HiSparse its 384 GiB host pool: `--host-pool-gib 384`), i.e. the calculator's 15 GiB
  runtime reserve and its 576 B host rows;
* `mechanisms`: the same formulas with the quantities the simulator models differently: the
  KV pool vLLM derives at start-up (0.92 x HBM - weights - the calibration's runtime_gib, null
  block), the served layout (656 B fp8_ds_mla rows: the offloading arm's GPU blocks, and the host
  block with host_bytes_scale) and, for HiSparse, vLLM 0.32.0's GPU layout
  (harness/sim/hisparse_layout.py: the pool in 209,920 B blocks, a host-reading request's
  indexer, hot-region and tail blocks);
* `+window` (HiSparse): the same with one request being admitted, which reserves its in-flight
  window of resident blocks (1,024 x 21) and its indexer blocks: 1 + (pool - that) // request;
* `simulated`: the running requests of a simulated point with three times the `mechanisms`
  limit of clients (at most 300; with twice, H200 HiSparse's 82 clients held 23.5 running, the
  queue of 76K first turns not yet memory-bound), on 8-turn conversations whose context grows
  from 76,000 to ~83,000 tokens: `steady`, the median of the running gauge over the middle
  half of the point (what a capacity is), and `mean`, the figure's mean of the non-zero samples
  (it also counts the ramp, while the first turns' 76K prefills are admitted one chunk at a
  time, and the tail).
The gap shipped -> mechanisms is the modelled memory accounting; mechanisms -> simulated is the
dynamics (prefill time, the turn boundaries, the vLLM 0.32 admission window).

Run: PYTHONPATH=$PWD /work/main/.venv/bin/python benchmarks/bench_sim_capacity.py [CALIBRATION]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from statistics import median

from harness import metric_names as mn
from harness.capacity.deployment import make_deployment
from harness.capacity.formulas import capacity_at
from harness.serve.profiles import load_profile
from harness.sim.config import load_calibration, setup_from_profile
from harness.sim.run import load_workload, simulate_points
from harness.sim.startup import admission_window_blocks

CALIBRATION = Path(__file__).resolve().parents[1] / "launch" / "calibrations" / "glm53-h200.yaml"
CONTEXT = 80_000
HOST_POOL_GIB = 384.0  # the HiSparse arms' host_pool_gib
ARMS = {"offload512-nomtp": "baseline_limit", "hisparse384-nomtp": "hisparse_limit"}


def sets(clients: int) -> list[str]:
    return [f"sweep.points=[[{clients},{clients}]]", "sweep.dataset_offset=0"]


def main() -> None:
    cal = load_calibration(Path(sys.argv[1]) if len(sys.argv) > 1 else CALIBRATION)
    # the H200 calibration's parameters on another GPU (a calibration names its GPU, so it is
    # applied as parameters, with the residency model it was fitted with)
    params, residency = dict(cal.params), cal.residency
    with tempfile.TemporaryDirectory() as tmp:
        recipe = Path(tmp) / "fixed.yaml"
        recipe.write_text(
            "number: 300\nnum_turns: 8\nfirst_turn_length: 76000\nsubsequent_turn_length: 753\n",
            encoding="utf-8",
        )
        workload = load_workload(str(recipe))
        print(
            f"{'gpu':5} {'arm':18} {'KV GiB':>7} {'shipped':>7} {'mechanisms':>10} "
            f"{'+window':>7} {'steady':>7} {'vs shipped':>10} {'vs mech.':>8} {'mean':>6} {'time':>6}"
        )
        for gpu in ("h200", "b200", "b300"):
            for arm, limit in ARMS.items():
                probe = setup_from_profile(load_profile(arm), None, params, gpu, residency)
                hisparse = probe.policy == "hisparse"
                host = HOST_POOL_GIB if hisparse else None
                shipped_dep = make_deployment(
                    probe.model, gpu=gpu, tp=probe.tp, max_seqs=256, host_pool_gib=host
                )
                rows = probe.facts["hot_rows"]
                host_cap = HOST_POOL_GIB if hisparse else float("inf")
                shipped = int(getattr(capacity_at(shipped_dep, CONTEXT, rows, host_cap), limit))
                kv = probe.facts["kv_gib_per_gpu"]
                mech_dep = make_deployment(
                    probe.model,
                    gpu=gpu,
                    tp=probe.tp,
                    max_seqs=256,
                    host_pool_gib=host,
                    kv_gib_per_gpu=kv,
                )
                served_host = host_cap / probe.roofline.host_bytes_scale
                lim = capacity_at(mech_dep, CONTEXT, rows, served_host)
                mech, window = int(getattr(lim, limit)), None
                if hisparse:  # the GPU side as vLLM 0.32.0 lays it out, the host side as before
                    gpu_side, window = served_limits(probe)
                    mech = int(min(gpu_side, lim.host_limit, 256))
                    window = int(min(window, lim.host_limit, 256))
                else:  # vLLM's blocks of served rows (the simulator's pool, null block off)
                    mech = min(
                        256, probe.pool_units // -(-CONTEXT // probe.model.block_tokens.baseline)
                    )
                prof = load_profile(arm, sets(min(300, 3 * mech)))
                setup = setup_from_profile(prof, None, params, gpu, residency)
                t0 = time.perf_counter()
                ((rec, samples),) = simulate_points(setup, workload, prof.sweep, gpus=prof.gpus)
                took = time.perf_counter() - t0
                steady = steady_running(samples)
                occ = rec.metrics["occupancy"] or 0.0
                print(
                    f"{gpu:5} {arm:18} {kv:7.2f} {shipped:7d} {mech:10d} "
                    f"{'-' if window is None else window:>7} {steady:7.1f} "
                    f"{100 * (steady / shipped - 1):+9.1f}% {100 * (steady / mech - 1):+7.1f}% "
                    f"{occ:6.1f} {took:5.1f}s"
                )


def served_limits(setup) -> tuple[float, float]:
    """HiSparse requests of CONTEXT tokens reading from host that the served pool holds: alone,
    and beside one request being admitted with its window (the simulator's own sizes)."""
    args, bt = setup.policy_args, setup.model.block_tokens.gpu
    indexer = -(-CONTEXT // bt) * args["indexer_units"]
    per_request = indexer + args["lease_units"]
    window = admission_window_blocks("hisparse", "vllm-0.32", 32768, CONTEXT, bt) or 0
    admitting = window * args["latent_units"] + indexer
    return setup.pool_units // per_request, 1 + (setup.pool_units - admitting) // per_request


def steady_running(samples: list) -> float:
    """The median running gauge over the middle half of the point."""
    running = [s for s in samples if s.name == mn.NUM_REQUESTS_RUNNING]
    start, end = running[0].timestamp, running[-1].timestamp
    low, high = start + (end - start) / 4, end - (end - start) / 4
    return float(median(s.value for s in running if low <= s.timestamp <= high))


if __name__ == "__main__":
    main()
