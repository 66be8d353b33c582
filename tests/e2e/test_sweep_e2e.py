"""End-to-end sweeps on the real CPU vLLM build with the real pinned EvalScope client.

Every derived metric in point.json is recomputed here independently (pandas) from samples.csv and
EvalScope's own files (benchmark_summary.json, benchmark_percentile.json, benchmark_data.db).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from procs import children
from support.evalscope_dirs import evalscope_point_dir

from harness.errors import RunError
from harness.results import load_run
from harness.run.sweep import SweepRequest, run_sweep
from harness.sim.parity import point_deltas
from harness.sim.trace_check import check_trace

QUIET = {"echo": lambda _msg: None}


# --------------------------------------------------------------------------- independent recompute


def _counter_delta(df: pd.DataFrame, name: str) -> float | None:
    rows = df[df["name"].isin([name, name + "_total"])]
    if rows.empty:
        return None
    total = 0.0
    for _, series in rows.groupby("labels"):
        values = series.sort_values("monotonic")["value"]
        steps = values.diff().dropna()
        total += float(steps.where(steps >= 0, values.reindex(steps.index)).sum())  # reset
    return total


def recompute(run_dir: Path, point, gpus: int) -> dict[str, float | None]:
    samples = pd.read_csv(run_dir / "points" / point.point_id / "samples.csv")
    evs = evalscope_point_dir(run_dir, point)
    summary = json.loads((evs / "benchmark_summary.json").read_text())
    percentiles = pd.DataFrame(json.loads((evs / "benchmark_percentile.json").read_text()))
    with sqlite3.connect(evs / "benchmark_data.db") as con:
        reqs = pd.read_sql("SELECT start_time, completed_time FROM result", con)

    def gauge(name: str, how: str) -> pd.Series:
        rows = samples[samples["name"] == name]
        return rows.groupby("monotonic")["value"].agg(how)

    running = gauge("vllm:num_requests_running", "sum")
    waiting = gauge("vllm:num_requests_waiting", "sum")
    kv = gauge("vllm:kv_cache_usage_perc", "max")
    nonzero = running[running > 0]
    drafts = _counter_delta(samples, "vllm:spec_decode_num_drafts")
    accepted = _counter_delta(samples, "vllm:spec_decode_num_accepted_tokens")
    hits = _counter_delta(samples, "vllm:prefix_cache_hits")
    queries = _counter_delta(samples, "vllm:prefix_cache_queries")
    tpot_sum = _counter_delta(samples, "vllm:request_time_per_output_token_seconds_sum")
    tpot_count = _counter_delta(samples, "vllm:request_time_per_output_token_seconds_count")
    p99 = percentiles.set_index("Percentiles").loc["99%"]
    span = reqs["completed_time"].max() - reqs["start_time"].min()
    return {
        "occupancy": float(nonzero.mean()) if len(nonzero) else None,
        "waiting_mean": float(waiting.mean()),
        "waiting_max": float(waiting.max()),
        "kv_cache_usage_mean": float(kv.mean()),
        "kv_cache_usage_max": float(kv.max()),
        # a point whose every reply streamed as one chunk has a TPOT of 0: no interactivity
        "interactivity": 1000.0 / summary["TPOT (ms)"] if summary["TPOT (ms)"] else None,
        "mean_tpot_ms": summary["TPOT (ms)"],
        "mean_ttft_ms": summary["TTFT (ms)"],
        "mean_itl_ms": summary["ITL (ms)"],
        "throughput_per_gpu": summary["Total Throughput (tok/s)"] / gpus,
        "output_throughput_per_gpu": summary["Output Throughput (tok/s)"] / gpus,
        "output_tps_per_user": summary["Output Throughput (tok/s)"] / point.parallel,
        "request_throughput": summary["Req Throughput (req/s)"],
        "client_kv_cache_hit_rate": summary["KV Cache Hit Rate (%)"] / 100.0,
        "duration_s": summary["Test Duration (s)"],
        "p99_ttft_ms": float(p99["TTFT (ms)"]),
        "p99_tpot_ms": float(p99["TPOT (ms)"]),
        "preemptions": _counter_delta(samples, "vllm:num_preemptions"),
        "mtp_acceptance_length": (1 + accepted / drafts) if drafts else None,
        "prefix_cache_hit_rate": (hits / queries) if queries else None,
        "server_tpot_ms": (1000 * tpot_sum / tpot_count) if tpot_count else None,
        "client_in_flight_mean": float((reqs["completed_time"] - reqs["start_time"]).sum() / span),
    }


def assert_metrics_match(run_dir: Path, gpus: int = 1) -> None:
    for point in load_run(run_dir).points:
        expected = recompute(run_dir, point, gpus)
        for key, value in expected.items():
            got = point.metrics[key]
            if value is None:
                assert got is None, (point.point_id, key, got)
            else:
                assert got == pytest.approx(value, rel=1e-9, abs=1e-12), (point.point_id, key)


def assert_valid_points(run_dir: Path) -> None:
    run = load_run(run_dir)
    for point in run.points:
        assert point.valid, (point.point_id, point.invalid_reasons)
        assert point.client.failed_requests == 0
        assert point.client.total_requests == point.expected_requests == point.number * 4
        assert point.samples >= 2  # at least the start and end samples
        assert point.window[0] >= point.started_at and point.window[1] <= point.ended_at
        assert point.fidelity["empty_assistant_messages"] == 0
        assert point.fidelity["short_growth_turns"] == 0


# --------------------------------------------------------------------------- sweeps


def test_mtp_sweep_measures_acceptance_from_server_counters(server_factory, tmp_path):
    server = server_factory("cpu-tiny-mtp")
    # MTP decoding on CPU is slow (tens of tok/s per request): keep the points small.
    run_dir = run_sweep(
        SweepRequest(
            "cpu-tiny-mtp",
            overrides=["sweep.points=[[1,1],[4,4]]"],
            url=server.base_url,
            out=tmp_path,
            run_id="mtp",
        ),
        echo=QUIET["echo"],
    )
    run = load_run(run_dir)
    assert run.manifest.status == "complete"
    assert [p.label for p in run.points] == ["c1", "c4"]
    assert [p.dataset_offset for p in run.points] == [2, 3]  # chained like the single command
    assert run.points[1].conversations == list(range(3, 7))
    assert_valid_points(run_dir)
    for point in run.points:
        # The bigram MTP model's drafts are always right: 1 + accepted/drafts = 2 exactly.
        assert point.metrics["mtp_acceptance_length"] == pytest.approx(2.0, abs=0.02)
        assert point.metrics["spec_acceptance_rate"] == pytest.approx(1.0, abs=0.01)
        assert point.metrics["throughput_per_gpu"] > 0
    assert_metrics_match(run_dir)
    summary = pd.read_csv(run_dir / "summary.csv")
    assert list(summary["point_id"]) == ["p001-n0001-r0", "p004-n0004-r0"]


def test_pressure_sweep_preempts_and_caps_occupancy(traced_pressure_server, tmp_path):
    server, trace = traced_pressure_server
    # Longer replies grow each running request by ~1.5 KV blocks per turn: with 16 blocks the
    # scheduler must preempt (64-token replies were admitted without any preemption).
    run_dir = run_sweep(
        SweepRequest(
            "cpu-tiny-pressure",
            overrides=["sweep.points=[[1,1],[8,8]]", "sweep.max_tokens=192"],
            url=server.base_url,
            out=tmp_path,
            run_id="pressure",
        ),
        echo=QUIET["echo"],
    )
    run = load_run(run_dir)
    assert_valid_points(run_dir)
    top = run.points[-1]
    assert top.parallel == 8
    assert top.metrics["preemptions"] > 0
    # What the server counts, never the sampled gauges: on a loaded machine a busy API server
    # answered every /metrics read of this point with 0 running (occupancy None), though the
    # engine ran requests throughout. The pool holds few of the 8: the engine's own time per
    # request over the point is under half the clients' in-flight mean (6.9 of 8 here), and
    # requests spend longer queued for blocks than in the engine (unpressured, ms against s).
    engine = top.metrics["engine_occupancy"]
    assert 0 < engine < 0.5 * top.metrics["client_in_flight_mean"], top.metrics
    counted = point_deltas(run, top)
    assert counted.queue_s > counted.inference_s, counted
    assert top.metrics["mtp_acceptance_length"] is None  # no speculative decoding here
    assert top.metrics["prefix_cache_hit_rate"] is not None
    assert_metrics_match(run_dir)
    # The simulator's scheduler, fed the same requests at the same moments, makes every
    # decision vLLM made on this server, preemptions included (harness/sim/trace_check.py).
    check = check_trace(trace)
    # c1 x 1 conversation and c8 x 8, four turns each: 36 requests at least (warm-ups besides)
    assert check.requests >= 36 and check.real_preemptions > 0, check.summary()
    assert check.exact, "\n".join(
        [check.summary(), *(d.describe(check.names) for d in check.divergences)]
    )
    assert check.sim_preemptions == check.real_preemptions


def test_resume_after_interrupt_gives_the_same_summary(server_factory, tmp_path):
    server = server_factory("cpu-tiny")
    sets = ["sweep.points=[[1,2],[2,4]]"]
    full = run_sweep(
        SweepRequest("cpu-tiny", overrides=sets, url=server.base_url, out=tmp_path, run_id="full"),
        echo=QUIET["echo"],
    )

    def interrupt_after_first_point(msg: str) -> None:
        if msg.startswith("  p001-n0002-r0: "):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(
            SweepRequest(
                "cpu-tiny", overrides=sets, url=server.base_url, out=tmp_path, run_id="cut"
            ),
            echo=interrupt_after_first_point,
        )
    cut = tmp_path / "cut"
    partial = load_run(cut)
    assert partial.manifest.status == "partial"
    assert [p.point_id for p in partial.points] == ["p001-n0002-r0"]
    with pytest.raises(RunError, match="already exists"):
        run_sweep(
            SweepRequest(
                "cpu-tiny", overrides=sets, url=server.base_url, out=tmp_path, run_id="cut"
            ),
            echo=QUIET["echo"],
        )

    run_sweep(SweepRequest("cpu-tiny", resume=cut), echo=QUIET["echo"])
    resumed = load_run(cut)
    assert resumed.manifest.status == "complete"

    def rows(run_dir: Path) -> list[tuple]:
        summary = json.loads((run_dir / "summary.json").read_text())
        points = {p.point_id: p for p in load_run(run_dir).points}
        return [
            (
                r["point_id"],
                r["valid"],
                points[r["point_id"]].client.total_requests,
                points[r["point_id"]].conversations,
            )
            for r in summary["rows"]
        ]

    assert rows(cut) == rows(full)
    assert load_run(cut).manifest.configuration_key == load_run(full).manifest.configuration_key
    with pytest.raises(RunError, match="complete"):
        run_sweep(SweepRequest("cpu-tiny", resume=cut), echo=QUIET["echo"])


def test_repeats_record_median_and_ci(server_factory, tmp_path):
    server = server_factory("cpu-tiny")
    run_dir = run_sweep(
        SweepRequest(
            "cpu-tiny",
            url=server.base_url,
            out=tmp_path,
            run_id="rep",
            repeats=3,
            only_points=["c1"],
        ),
        echo=QUIET["echo"],
    )
    run = load_run(run_dir)
    assert [p.point_id for p in run.points] == [f"p001-n0002-r{r}" for r in range(3)]
    # Fresh conversations per repeat: offset advances by `number`.
    assert [p.conversations for p in run.points] == [[2, 3], [4, 5], [6, 7]]
    summary = json.loads((run_dir / "summary.json").read_text())
    (agg,) = summary["aggregates"]
    assert agg["valid_repeats"] == 3
    # Median and bounds on metrics every repeat defines. The client's TPOT is not one of them:
    # a 64-token reply of the tiny model streams in ~0.1 s, and when the client's reads
    # coalesce it (a busy machine) EvalScope reads 0.0 ms and interactivity is null (seen in a
    # CI run, three test workers on two cores: 0.45, 0.0, 0.0 ms; the server's TPOT 1.54-1.60 ms).
    for metric in ("throughput_per_gpu", "server_tpot_ms", "engine_occupancy"):
        values = sorted(p.metrics[metric] for p in run.points)
        assert agg[metric] == pytest.approx(values[1]), metric
        assert agg[f"{metric}_ci_low"] == pytest.approx(values[0]), metric
        assert agg[f"{metric}_ci_high"] == pytest.approx(values[2]), metric
    # A null repeat is left out of the median, never read as zero.
    defined = [p.metrics["interactivity"] for p in run.points if p.metrics["interactivity"]]
    if defined:
        assert min(defined) <= agg["interactivity"] <= max(defined)
    else:
        assert agg["interactivity"] is None


# --------------------------------------------------------------------------- server lifecycle


def _server_group(port: int) -> int | None:
    """Process group of the vLLM server this test process launched on `port` (via /proc)."""
    for pgid, cmd in children(os.getpid()).values():
        if " serve " in cmd and f" --port {port} " in f"{cmd} ":
            return pgid
    return None


def test_server_killed_mid_point_is_invalid_and_sweep_continues(cpu_build, tmp_path):
    from harness.serve.server import free_port

    port = free_port()
    killed: dict[str, object] = {}

    def killer() -> None:
        # Freeze the engine (SIGSTOP) as soon as the point's client exists, then kill the
        # server's group: frozen, the engine finishes no request, so the point cannot end
        # before the kill. Reading a /metrics count first raced the engine: a busy API server
        # answered such reads only after the requests had ended (the running gauge read 0 on
        # most scrapes; a count of 2 finished was seen once all 32 had finished). Between the
        # client's start and the freeze there is only a /proc scan, against the client's
        # start-up and 32 requests of 192 tokens.
        deadline = time.monotonic() + 900
        client_log = tmp_path / "kill" / "points" / "p002-n0008-r0" / "client.log"
        while not client_log.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        while "pgid" not in killed and time.monotonic() < deadline:
            pgid = _server_group(port)  # None while a /proc entry is unreadable: look again
            engines = [p for p, (_, cmd) in children(pgid).items() if "EngineCore" in cmd]
            if pgid and engines:
                os.kill(engines[0], signal.SIGSTOP)
                os.killpg(pgid, signal.SIGKILL)  # the stopped engine dies with its group
                killed["pgid"] = pgid

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    run_dir = run_sweep(
        SweepRequest(
            "cpu-tiny",
            # enforce-eager: two starts (the first and the restart) without compilation
            overrides=[
                "sweep.points=[[2,8],[1,2]]",
                "sweep.max_tokens=192",
                "serve.enforce-eager=true",
            ],
            out=tmp_path,
            run_id="kill",
            port=port,
        ),
        echo=QUIET["echo"],
    )
    thread.join(timeout=5)
    assert "pgid" in killed
    run = load_run(run_dir)
    assert run.manifest.engine == "vllm" and run.manifest.status == "complete"
    first, second = sorted(run.points, key=lambda p: p.started_at)
    assert not first.valid
    assert "server died during the point" in first.invalid_reasons
    assert "server restarted after this point" in first.notes
    assert second.valid, second.invalid_reasons
    assert second.client.total_requests == 2 * 4
    assert (run_dir / "server.log").exists()
    assert _server_group(port) is None  # the restarted server was stopped at the end
