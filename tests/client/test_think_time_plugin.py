"""Think time through the real pinned EvalScope (the `repro_think` API plugin) and the real
sweep pipeline, against the loopback fake OpenAI server: every turn after the first of a
conversation starts after its drawn pause, and no request's times contain it. Assertions are on
the recorded timestamps (the pause log and EvalScope's sqlite), never on wall-clock bounds.
"""

from __future__ import annotations

import json
import sqlite3

import pytest
from support.fake_openai import SETS

from harness.analysis.request_table import read_table
from harness.client.evalscope import ClientArgs, client_command
from harness.client.thinktime import read_log
from harness.dataset.thinktime import PauseTable, ThinkTime
from harness.results import load_run
from harness.run.sweep import SweepRequest, run_sweep

THINK = "sweep.think_time={kind: exponential, mean_s: 0.4, seed: 11, max_s: 1.5}"


def test_think_time_sweep_pauses_between_turns_and_never_inside_a_request(
    fake_server, small_dataset, tmp_path
):
    sets = [s for s in SETS if not s.startswith("sweep.points")]
    sets += ["sweep.points=[[2,4]]", THINK, "sweep.slo=ttft=2s,tpot=50ms"]
    run_dir = run_sweep(
        SweepRequest(
            "cpu-tiny",
            overrides=sets,
            dataset=str(small_dataset),
            url=fake_server(),
            out=tmp_path,
            run_id="think",
        ),
        echo=lambda _: None,
    )
    run = load_run(run_dir)
    (point,) = run.points
    assert point.valid, point.invalid_reasons
    assert "--api" in point.client_command and "repro_think" in point.client_command
    assert run.manifest.sweep["think_time"]["kind"] == "exponential"

    pauses = PauseTable(ThinkTime(kind="exponential", mean_s=0.4, seed=11, max_s=1.5))
    log = read_log(run_dir / "points" / point.point_id / "evalscope" / "think_time.jsonl")
    assert sorted((e["conversation"], e["turn"]) for e in log) == [(c, 2) for c in range(4)]
    for entry in log:  # the drawn pause, slept in full
        assert entry["pause_s"] == pytest.approx(pauses.pause(entry["conversation"], 2))
        assert entry["sleep_end"] - entry["sleep_start"] >= entry["pause_s"] - 0.002

    ev = run_dir / "points" / point.point_id / "evalscope" / point.point_id
    db = next(ev.glob("parallel_*/benchmark_data.db"))
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "SELECT request, start_time, completed_time, first_chunk_latency, latency FROM result"
        ).fetchall()
    by_turn = {}
    for body, start, end, ttft, latency in rows:
        messages = json.loads(body)["messages"]
        conv = int(messages[0]["content"].split()[1])  # "conversation C turn 0"
        turn = 1 + sum(m["role"] == "assistant" for m in messages)
        by_turn[(conv, turn)] = (start, end, ttft, latency)
    for entry in log:
        conv = entry["conversation"]
        _, t1_end, _, _ = by_turn[(conv, 1)]
        t2_start, t2_end, ttft, latency = by_turn[(conv, 2)]
        # (a) the second turn starts after the first ended plus the whole drawn pause
        assert t2_start - t1_end >= entry["pause_s"] - 0.002
        # (b) the request's measured interval starts after the pause ended ...
        assert entry["sleep_start"] >= t1_end and t2_start >= entry["sleep_end"]
        # ... so its latency and TTFT are measured from after the pause
        assert latency == pytest.approx(t2_end - t2_start, abs=1e-6)
        assert ttft <= latency

    table = read_table(run_dir / "points" / point.point_id / "requests.parquet")
    assert sorted(zip(table["conversation"], table["turn"], strict=True)) == sorted(by_turn)
    second = table[table["turn"] == 2]
    assert (second["gap_s"] >= second["think_s"] - 0.002).all()
    assert point.metrics["slo_attainment"] is not None
    assert point.metrics["p50_ttft_ms"] is not None and point.metrics["p90_e2e_s"] is not None


def test_no_think_time_keeps_the_blog_command(tmp_path):
    args = ClientArgs("m", "http://h:1", tmp_path / "d.json", 220, True, None, {})
    plain = client_command(
        args, parallel=8, number=16, dataset_offset=56, name="p", outputs_dir=tmp_path
    )
    zero = ClientArgs(
        "m", "http://h:1", tmp_path / "d.json", 220, True, None, {},
        think_time=ThinkTime(kind="fixed", seconds=0),
    )  # fmt: skip
    assert (
        client_command(
            zero, parallel=8, number=16, dataset_offset=56, name="p", outputs_dir=tmp_path
        )
        == plain
    )
    assert plain[0] == "evalscope" and plain[plain.index("--api") + 1] == "openai"
    paused = ClientArgs(
        "m", "http://h:1", tmp_path / "d.json", 220, True, None, {},
        think_time=ThinkTime(kind="fixed", seconds=5),
    )  # fmt: skip
    cmd = client_command(
        paused, parallel=8, number=16, dataset_offset=56, name="p", outputs_dir=tmp_path
    )
    perf = cmd[cmd.index("--") + 1 :]
    # the same EvalScope argv, only the API plugin differs
    assert perf == [*plain[1:plain.index("--api") + 1], "repro_think",
                    *plain[plain.index("--api") + 2 :]]  # fmt: skip
