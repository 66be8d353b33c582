"""Think time on the real CPU vLLM with the real pinned EvalScope (`repro_think` API plugin).

One server start (cpu-tiny), one point of 4 conversations x 4 turns at c2 with exponential
think time (mean 1 s, seeded). Checked on recorded timestamps only (the plugin's pause log and
EvalScope's sqlite, both on the client's perf_counter clock), never on the machine's speed:

(a) each turn after the first starts at least its drawn pause after the previous turn of its
    conversation ended, and the pause is the one the seeded model draws for that turn;
(b) the pause lies between the previous reply's end and the next request's start, so no
    request's TTFT, TPOT or latency (all measured from that start) contains it.

(c) the server's own cached prompt tokens (cpu-tiny is served with
    --enable-prompt-tokens-details) were kept for every request, and are plausible: each turn
    after the first found part of its history cached (> 0, at most its prompt, never less than
    the turn before: a 1 GiB KV cache evicts nothing of this run, whatever the pause).

Then the run's report shows the per-turn figures and `repro claims check` gates on goodput.
"""

from __future__ import annotations

import pytest
from support.think_time import check_report_and_claims, check_think_time_run, usage_by_request

from harness.analysis.request_table import read_table
from harness.dataset.thinktime import ThinkTime
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
    check_think_time_run(run_dir, point, THINK, turns=4)
    table = read_table(run_dir / "points" / point.point_id / "requests.parquet")
    # (c) the server's cached tokens, as the plugin logged them and the table stored them
    assert all(v is not None for v in usage_by_request(run_dir, point).values())
    for _conv, rows in table[table["success"]].groupby("conversation"):
        rows = rows.sort_values("turn")
        cached = [int(v) for v in rows["server_cached_tokens"]]
        prompt = [int(v) for v in rows["prompt_tokens"]]
        assert all(0 < c <= p for c, p in zip(cached[1:], prompt[1:], strict=True)), rows
        assert cached[1:] == sorted(cached[1:])
    assert point.metrics["slo_attainment"] == 1.0  # ttft <= 60 s, tpot <= 5 s
    assert point.metrics["goodput_rps"] == pytest.approx(
        16 / (table["end_s"].max() - table["start_s"].min())
    )
    check_report_and_claims(run_dir, tmp_path, "cpu-tiny", parallel=2)
