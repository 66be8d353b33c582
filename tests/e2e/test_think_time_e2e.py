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

import pytest
from support.think_time import check_report_and_claims, check_think_time_run

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
    assert point.metrics["slo_attainment"] == 1.0  # ttft <= 60 s, tpot <= 5 s
    assert point.metrics["goodput_rps"] == pytest.approx(
        16 / (table["end_s"].max() - table["start_s"].min())
    )
    check_report_and_claims(run_dir, tmp_path, "cpu-tiny", parallel=2)
