"""A reduced-size simulated sweep end to end: run directory, determinism, harness readers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.analysis.compare import compare_runs
from harness.analysis.metrics import derive_point_metrics
from harness.client.scrape import read_samples_csv
from harness.errors import RunError
from harness.measurement import Measurement
from harness.results import load_run
from harness.sim.run import run_simulation

SETS = ["sweep.points=[[1,2],[4,8]]", "sweep.dataset_offset=3", "sweep.scrape_interval_s=2"]


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sim")
    recipe = root / "small.yaml"
    recipe.write_text(
        "number: 10\nnum_turns: 3\nfirst_turn_length: 30000\nsubsequent_turn_length: 500\n"
    )
    return recipe


def simulate(
    small: Path, out: Path, rid: str, profile: str = "offload512", extra: tuple[str, ...] = ()
) -> Path:
    return run_simulation(
        profile, dataset=str(small), overrides=[*SETS, *extra], out=out, run_id=rid
    )


def test_run_directory_has_the_sweep_schema_and_derived_metrics(small, tmp_path):
    run_dir = simulate(small, tmp_path, "a")
    run = load_run(run_dir)
    assert run.manifest.engine == "sim" and run.manifest.build["engine"] == "sim"
    assert [p.label for p in run.points] == ["c1", "c4"]
    c4 = run.points[1]
    # EvalScope rotation: offset 3 + 2 conversations of c1 = 5; 8 conversations from 5, cycled.
    assert c4.dataset_offset == 5 and c4.conversations == [5, 6, 7, 8, 9, 0, 1, 2]
    assert c4.valid and c4.client.total_requests == 8 * 3 == c4.expected_requests
    # point.json's metrics are the harness's own derivation of the samples.csv written.
    samples = read_samples_csv(run_dir / "points" / c4.point_id / "samples.csv")
    names = {s.name for s in samples}
    assert {
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:num_preemptions_total",
        "vllm:spec_decode_num_drafts_total",
        "vllm:prefix_cache_hits_total",
        "vllm:kv_cache_usage_perc",
    } <= names
    again = derive_point_metrics(
        Measurement("sim", samples=tuple(samples), client=c4.client), parallel=4, gpus=8
    )
    assert again.metrics["occupancy"] == c4.metrics["occupancy"] is not None
    assert 1.0 <= c4.metrics["occupancy"] <= 4.0
    # 30,000-token first turns: the turn-2 prompt is 30,720 tokens; client estimate as EvalScope
    assert c4.metrics["client_kv_cache_hit_rate"] > 0.6
    # vLLM's inference-time histogram: one observation per finished request, each inside its
    # request's client time (the frontend's work comes first), so the engine occupancy is
    # positive and at most the client's in-flight mean.
    count = [x.value for x in samples if x.name == "vllm:request_inference_time_seconds_count"]
    assert count[-1] - count[0] == 8 * 3
    engine = c4.metrics["engine_occupancy"]
    assert 0.0 < engine <= c4.metrics["client_in_flight_mean"] + 1e-9


def test_same_inputs_give_identical_point_records(small, tmp_path):
    one, two = simulate(small, tmp_path, "one"), simulate(small, tmp_path, "two")
    for a, b in zip(sorted(one.glob("points/*/*")), sorted(two.glob("points/*/*")), strict=True):
        assert a.name == b.name and a.read_bytes() == b.read_bytes()
    rows = compare_runs(load_run(one), load_run(two))
    assert rows  # the comparison reads simulated runs like real ones


def test_a_simulation_never_writes_into_an_existing_run(small, tmp_path):
    run_dir = tmp_path / "real"
    run_dir.mkdir()
    (run_dir / "manifest.json").write_text(json.dumps({"engine": "vllm"}))
    with pytest.raises(RunError, match="already exists"):
        simulate(small, tmp_path, "real")
    assert json.loads((run_dir / "manifest.json").read_text()) == {"engine": "vllm"}


def test_a_smaller_kv_pool_lowers_occupancy_and_raises_waiting(small, tmp_path):
    # 1,200 blocks x 64 tokens hold two of these ~31K-token requests fully resident (and
    # not one of 142,000 tokens: the max-model-len must come down for the engine to start).
    tight = load_run(
        simulate(
            small,
            tmp_path,
            "tight",
            extra=("serve.num-gpu-blocks-override=1200", "serve.max-model-len=40960"),
        )
    )
    roomy = load_run(simulate(small, tmp_path, "roomy"))
    t, r = tight.points[1].metrics, roomy.points[1].metrics
    assert t["occupancy"] <= 2.0 < r["occupancy"]
    assert t["waiting_mean"] > r["waiting_mean"]


def test_frontend_time_delays_each_turn_by_its_prompt_length(small):
    from dataclasses import replace

    from harness.serve.profiles import load_profile
    from harness.sim.config import setup_from_profile
    from harness.sim.run import load_workload, simulate_points

    prof = load_profile("offload512", [*SETS, "sweep.points=[[1,2]]"])
    setup = setup_from_profile(prof)
    slow = replace(setup, roofline=replace(setup.roofline, frontend_us_per_token=10.0))
    fast = replace(setup, roofline=replace(setup.roofline, frontend_us_per_token=0.0))
    wl = load_workload(str(small))
    (a, _), (b, _) = (simulate_points(s, wl, prof.sweep, gpus=8)[0] for s in (slow, fast))
    # One request at a time: every TTFT grows by prompt x 10 us, i.e. the mean by
    # mean prompt (the client's avg input tokens) x 10 us.
    extra_ms = a.client.mean_ttft_ms - b.client.mean_ttft_ms
    assert extra_ms == pytest.approx(a.client.avg_input_tokens * 10e-3, rel=1e-6)


def test_claims_and_dashboard_read_simulated_blog_sweeps(tmp_path):
    """The blog's five points on a reduced workload: claims get values, the page says simulated."""
    from harness.gate.claims import run_claims
    from harness.report.dashboard import write_report

    recipe = tmp_path / "blogish.yaml"
    recipe.write_text(
        "number: 128\nnum_turns: 2\nfirst_turn_length: 6000\nsubsequent_turn_length: 300\n"
    )
    sets = ["sweep.scrape_interval_s=2"]
    runs = [
        run_simulation(arm, dataset=str(recipe), overrides=sets, out=tmp_path, run_id=arm)
        for arm in ("hisparse384", "offload512")
    ]
    results, _ = run_claims(runs)
    applied = [r for r in results if r.status != "skipped"]
    assert applied and all(r.left is not None for r in applied), [r.detail for r in applied]
    page = write_report(runs, out=tmp_path / "report.html")
    assert "hisparse384 · simulated" in page.read_text(encoding="utf-8")


def test_a_simulated_point_is_a_measurement_judged_by_the_shared_rules(small, tmp_path):
    """Turn 3 no longer fits a 31,500-token max-model-len: each conversation's third turn fails
    at once and the point is invalid for the reasons a served point would give."""
    from harness.analysis.validity import invalid_reasons
    from harness.serve.profiles import load_profile
    from harness.sim.client import PointClient
    from harness.sim.config import setup_from_profile
    from harness.sim.run import load_workload, measurement

    prof = load_profile("offload512", [*SETS, "serve.max-model-len=31500"])
    engine = setup_from_profile(prof).build()
    client = PointClient(load_workload(str(small)), [0, 1], 2, 3, prof.sweep.max_tokens, 31500)
    m = measurement(client, engine.run_point(client, 2.0), parallel=2)
    assert [
        (r.conversation, r.turn, r.success)
        for r in sorted(m.requests, key=lambda r: (r.conversation, r.turn))
    ] == [(0, 1, True), (0, 2, True), (0, 3, False), (1, 1, True), (1, 2, True), (1, 3, False)]
    done = next(r for r in m.requests if r.success)
    assert done.ttft is not None and done.tpot is not None and len(done.itl) > 0
    assert m.client.failed_requests == 2 and m.percentiles.ttft_ms.p99 is not None
    assert m.samples and m.window is not None
    assert invalid_reasons(m, conversations=2, turns=3) == [
        "2 failed requests (prompt + max_tokens > max-model-len: conversation abandoned)",
        "success requests 4 != 6",
    ]


@pytest.mark.parametrize(
    ("threads", "ready_in_units"),
    [(1, [1, 2, 3, 4]), (2, [1, 1, 2, 2]), (4, [1, 1, 1, 1]), (None, [1, 1, 1, 1])],
)
def test_the_frontend_prepares_requests_sent_together_one_per_thread(threads, ready_in_units):
    """Hand-checked: four 50,000-token turns sent at t = 1 s, 4 us per prompt token (0.2 s
    each). One thread (vLLM 0.32.0's renderer pool) hands them to the engine 0.2 s apart; two
    threads two at a time; four, or no queue (unset), all at once."""
    from harness.serve.profiles import load_profile
    from harness.sim.config import setup_from_profile
    from harness.sim.request import Request

    params = {"frontend_us_per_token": 4.0}
    if threads is not None:
        params["frontend_threads"] = float(threads)
    engine = setup_from_profile(load_profile("offload512"), params=params).build()
    # A think time: this one is submitted first but sent at 5 s; it must not hold the others.
    engine.receive(Request(9, 9, 2, 50_000, 220, 5.0))
    for rid in range(4):
        engine.receive(Request(rid, rid, 1, 50_000, 220, 1.0))
    engine.now = 1.0
    engine.admit_ready()
    ready = sorted(t for t, _, _ in engine.pending)
    assert ready == pytest.approx([1.0 + 0.2 * k for k in ready_in_units])
    assert engine.next_ready() == pytest.approx(1.2)
    # By 5 s the threads are idle again: the paused request waits for nobody.
    engine.now = 5.0
    engine.admit_ready()
    assert [r.rid for _, _, r in engine.pending] == [9]
    assert engine.pending[0][0] == pytest.approx(5.2)


def test_frontend_threads_is_bounded_and_named():
    from harness.errors import ConfigError
    from harness.serve.profiles import load_profile
    from harness.sim.config import setup_from_profile

    with pytest.raises(ConfigError, match="frontend_threads"):
        setup_from_profile(load_profile("offload512"), params={"frontend_threads": 0.0})


def test_copy_submissions_stall_the_offloading_arm_by_what_the_gpu_did_not_hide(small):
    from dataclasses import replace

    from harness.serve.profiles import load_profile
    from harness.sim.config import setup_from_profile
    from harness.sim.run import load_workload, simulate_points

    # 1,200 GPU blocks hold two of these ~31K-token histories: at c4 the later turns load theirs
    # back from the CPU pool (about 490 blocks x 101 descriptors x 0.55 us = 27 ms to submit)
    sets = [*SETS, "sweep.points=[[4,8]]", "serve.num-gpu-blocks-override=1200"]
    prof = load_profile("offload512", [*sets, "serve.max-model-len=40960"])
    setup = setup_from_profile(prof, residency="vllm-0.32")
    assert setup.roofline.copy_submit_us == 0.55
    free = replace(setup, roofline=replace(setup.roofline, copy_submit_us=0.0))
    wl = load_workload(str(small))
    (priced, _), (unpriced, _) = (
        simulate_points(s, wl, prof.sweep, gpus=8)[0] for s in (setup, free)
    )
    assert unpriced.fidelity["copy_submit_stall_s"] == 0.0
    assert priced.fidelity["copy_submit_stall_s"] > 0.0
    # the stalls and the later loads make the point longer and its turns slower
    assert priced.ended_at - priced.started_at > unpriced.ended_at - unpriced.started_at
    assert priced.metrics["throughput_per_gpu"] < unpriced.metrics["throughput_per_gpu"]
