"""Hand-checked: a session whose blocks leave the GPU pool during its pause pays on its next turn.

Workload: 3 conversations x 3 turns (30,000 + 2 x 500 user tokens, 220-token replies) at c2, on a
GPU pool of 1,100 64-token blocks (`serve.num-gpu-blocks-override`). Conversation 0 pauses 30 s
before its turn 2 (a per-turn think-time file); nobody else pauses.

Offloading, by hand: after turn 1, conversation 0 leaves 30,220 // 64 = 472 full blocks in the
GPU prefix cache (and stores them to the CPU pool). During its pause conversation 1 finishes
(31,660 tokens: 494 cached blocks) and conversation 2 runs all three turns, growing to 31,660
tokens = 495 blocks. With the MTP drafter vLLM recomputes a hit's last block (drop_eagle_block),
so each of those two conversations' turns 2 and 3 leaves its previous run's last block behind:
cached where it was, newer than conversation 0's blocks, hittable by no one (4 blocks). Only
1,100 - 472 - 494 - 4 = 130 blocks are free and uncached, so 495 - 130 = 365 of conversation
0's blocks are evicted (the least recently used). Its turn 2 then finds 472 - 365 = 107 blocks
on the GPU and the rest in the CPU pool, and hits 471 blocks in all (472 less the block the
drafter recomputes), so it loads 364: 364 x the residency's bytes per block, the point's whole
`offload_load_gib`. Without the pause the same sweep loads nothing, and the turn's TTFT grows
by the worker's submission of the copy (364 blocks x 101 layer pages x 0.55 us = 20 ms) plus
the copy time (bytes / PCIe bytes per second).
HiSparse (vLLM 0.32 residency, 26,000 pool blocks; a 31,660-token conversation holds 495 x 22 =
10,890 of them resident: two conversations fit, three do not): conversation 2
runs during the pause and the pool reuses conversation 0's released pages; its turn 2 stages the
reused rows from the host before its prefill (only the missing rows), so the point's
host-to-device bytes go from 0 to > 1 GiB and its later turns are slower. Without the pause the
two running conversations fit and nothing is staged.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.analysis.request_table import read_table
from harness.report.per_turn import transfer_figure
from harness.results import load_run
from harness.sim.run import run_simulation


def engine_facts(run) -> tuple[int, float, float]:
    """(bytes per offloaded block, PCIe bytes/s, seconds to submit one block's copy) of the
    run's engine (profile, overrides and calibration as recorded)."""
    from harness.serve.profiles import load_profile
    from harness.sim.config import load_calibration, setup_from_profile

    prof = load_profile(run.manifest.profile_name, run.manifest.overrides)
    cal = run.manifest.build["calibration"]["path"]
    setup = setup_from_profile(prof, load_calibration(Path(cal)) if cal else None)
    residency = setup.build().residency
    submit = residency.copy_pages * residency.copy_submit_s
    return int(residency.block_bytes), float(residency.h2d.bytes_per_s), submit


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("pays")
    recipe = root / "three.yaml"
    recipe.write_text(
        "number: 3\nnum_turns: 3\nfirst_turn_length: 30000\nsubsequent_turn_length: 500\n"
    )
    pauses = root / "pauses.json"
    pauses.write_text(json.dumps({"pauses_s": [[30, 0], [0, 0], [0, 0]]}))
    return recipe, pauses


def simulate(files, out: Path, profile: str, paused: bool):
    recipe, pauses = files
    think = f"{{kind: file, path: {pauses}}}" if paused else "{kind: none}"
    run_dir = run_simulation(
        profile,
        dataset=str(recipe),
        overrides=[
            "sweep.points=[[2,3]]",
            "sweep.dataset_offset=0",
            "sweep.scrape_interval_s=1",
            "serve.num-gpu-blocks-override=" + ("1100" if profile == "offload512" else "26000"),
            "serve.max-model-len=40000",
            f"sweep.think_time={think}",
        ],
        out=out,
        run_id=f"{profile}-{'paused' if paused else 'plain'}",
    )
    run = load_run(run_dir)
    (point,) = run.points
    table = read_table(run_dir / "points" / point.point_id / "requests.parquet")
    return run, point, table.set_index(["conversation", "turn"])


def test_offloading_reloads_the_evicted_blocks_of_a_paused_session(files, tmp_path):
    _, plain, plain_t = simulate(files, tmp_path, "offload512", paused=False)
    run, paused, paused_t = simulate(files, tmp_path, "offload512", paused=True)
    assert plain.valid and paused.valid
    assert plain.metrics["offload_load_gib"] == 0.0
    loaded = paused.metrics["offload_load_gib"] * 2**30
    per_block, pcie, submit = engine_facts(run)
    assert loaded == pytest.approx(364 * per_block, rel=1e-12)
    assert submit == pytest.approx(101 * 0.55e-6)  # 101 layer pages a block, 0.55 us each
    assert paused_t.loc[(0, 2), "think_s"] == 30.0
    # the reload is on that turn's first token: it arrives later than the same turn's without
    # the pause by the worker's submission of the 364 blocks' descriptors, then their PCIe copy
    # (364 blocks / the channel's bytes per second)
    delay = paused_t.loc[(0, 2), "ttft_s"] - plain_t.loc[(0, 2), "ttft_s"]
    assert delay == pytest.approx(364 * submit + loaded / pcie, rel=0.05)
    # conversation 2, which ran during the pause, pays nothing
    assert paused_t.loc[(2, 2), "ttft_s"] == pytest.approx(plain_t.loc[(2, 2), "ttft_s"])
    assert paused.metrics["prefix_cache_hit_rate"] < plain.metrics["prefix_cache_hit_rate"]
    # counted in the point's transfer figure
    bars = {t.name: list(t.y) for t in transfer_figure([run]).data}
    assert bars["offload loads (CPU→GPU)"] == [paused.metrics["offload_load_gib"]]


def test_hisparse_reads_the_paused_sessions_history_from_the_host(files, tmp_path):
    _, plain, plain_t = simulate(files, tmp_path, "hisparse384", paused=False)
    _, paused, paused_t = simulate(files, tmp_path, "hisparse384", paused=True)
    assert plain.metrics["hisparse_h2d_gib"] == 0.0
    assert paused.metrics["hisparse_h2d_gib"] > 1.0
    # host-resident from its return on: both later turns reach their first token later (its
    # decode runs alone after the pause, so TPOT is not compared)
    for turn in (2, 3):
        assert paused_t.loc[(0, turn), "ttft_s"] > plain_t.loc[(0, turn), "ttft_s"]
