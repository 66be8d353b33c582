"""Think time on the real CPU vLLM with the real pinned EvalScope (`repro_think` API plugin).

One server start (cpu-tiny), one point of 4 conversations x 4 turns at c2 with exponential
think time (mean 1 s, seeded). Checked on recorded timestamps only (the plugin's pause log and
EvalScope's sqlite, both on the client's perf_counter clock), never on the machine's speed:

(a) each turn after the first starts at least its drawn pause after the previous turn of its
    conversation ended, and the pause is the one the seeded model draws for that turn;
(b) the pause lies between the previous reply's end and the next request's start, so no
    request's TTFT, TPOT or latency (all measured from that start) contains it.

Then the run's report shows the per-turn figures and `repro claims check` gates on goodput.
"""

from __future__ import annotations

import json
import sqlite3

import pytest
from click.testing import CliRunner

from harness.analysis.request_table import first_turn_key, read_table
from harness.cli import cli
from harness.client.thinktime import read_log
from harness.dataset.thinktime import PauseTable, ThinkTime
from harness.results import load_run
from harness.run.sweep import SweepRequest, run_sweep

pytestmark = pytest.mark.e2e

THINK = ThinkTime(kind="exponential", mean_s=1.0, seed=25)


def test_think_time_on_real_vllm(server_factory, tmp_path):
    server = server_factory("cpu-tiny")
    run_dir = run_sweep(
        SweepRequest(
            "cpu-tiny",
            overrides=[
                "coherence=null",
                "sweep.points=[[2,4]]",
                "sweep.think_time={kind: exponential, mean_s: 1.0, seed: 25}",
                "sweep.slo=ttft=60s,tpot=5s",
            ],
            url=server.base_url,
            out=tmp_path,
            run_id="think",
        ),
        echo=lambda _msg: None,
    )
    run = load_run(run_dir)
    (point,) = run.points
    assert point.valid, point.invalid_reasons
    assert point.client.total_requests == 16
    pdir = run_dir / "points" / point.point_id
    log = read_log(pdir / "evalscope" / "think_time.jsonl")
    ev = next((pdir / "evalscope" / point.point_id).glob("parallel_*"))
    with sqlite3.connect(ev / "benchmark_data.db") as con:
        rows = con.execute(
            "SELECT request, start_time, completed_time, first_chunk_latency, latency, "
            "time_per_output_token, completion_tokens FROM result"
        ).fetchall()
    requests = {}
    for body, start, end, ttft, latency, tpot, tokens in rows:
        messages = json.loads(body)["messages"]
        turn = 1 + sum(m["role"] == "assistant" for m in messages)
        requests[(first_turn_key(messages), turn)] = (start, end, ttft, latency, tpot, tokens)
    assert len(requests) == 16

    draws = PauseTable(THINK)
    assert sorted(e["turn"] for e in log) == [2, 3, 4] * 4
    assert {e["conversation"] for e in log} == set(point.conversations)
    for entry in log:
        prev_end = requests[(entry["key"], entry["turn"] - 1)][1]
        start, end, ttft, latency, tpot, tokens = requests[(entry["key"], entry["turn"])]
        assert entry["pause_s"] == draws.pause(entry["conversation"], entry["turn"])
        # (a) separated by at least the drawn pause
        assert start - prev_end >= entry["pause_s"] - 0.002
        # (b) the pause is over before the request starts; its times are measured from there
        assert prev_end <= entry["sleep_start"] < entry["sleep_end"] <= start
        assert entry["sleep_end"] - entry["sleep_start"] >= entry["pause_s"] - 0.002
        assert latency == pytest.approx(end - start, abs=1e-6)
        assert tpot == pytest.approx((latency - ttft) / (tokens - 1), rel=1e-6)

    table = read_table(pdir / "requests.parquet")
    later = table[table["turn"] > 1]
    assert sorted(later["think_s"]) == sorted(e["pause_s"] for e in log)
    assert (later["gap_s"] >= later["think_s"] - 0.002).all()
    assert point.metrics["slo_attainment"] == 1.0  # ttft <= 60 s, tpot <= 5 s
    assert point.metrics["goodput_rps"] == pytest.approx(
        16 / (table["end_s"].max() - table["start_s"].min())
    )

    report = tmp_path / "report.html"
    out = CliRunner().invoke(cli, ["report", str(run_dir), "--out", str(report)])
    assert out.exit_code == 0, out.output
    html = report.read_text()
    assert "TTFT by turn index" in html and "TTFT CDF" in html

    claims = tmp_path / "goodput.yaml"
    claims.write_text(
        "arms:\n  tiny: {profiles: [cpu-tiny]}\nclaims:\n"
        "  - id: tiny-meets-slo-at-c2\n"
        "    left: {arm: tiny, point: slo, field: parallel}\n    op: '>='\n    value: 2\n"
        "  - id: tiny-goodput\n"
        "    left: {arm: tiny, point: c2, metric: goodput_rps}\n    op: '>'\n    value: 0\n"
    )
    held = CliRunner().invoke(cli, ["claims", "check", str(run_dir), "--claims", str(claims)])
    assert held.exit_code == 0, held.output
    claims.write_text(claims.read_text().replace("value: 2", "value: 4"))
    failed = CliRunner().invoke(cli, ["claims", "check", str(run_dir), "--claims", str(claims)])
    assert failed.exit_code == 1, failed.output
    assert "tiny-meets-slo-at-c2" in failed.output
