"""Think time over the HTTP-simulated engine: the workload that drives the real vLLM
(tests/e2e/test_think_time_e2e.py) and the offline simulator drives `repro sim serve` through
the real EvalScope client and the `repro_think` plugin (`repro sweep --engine sim`).

Checked on recorded values only, never on the machine's speed:

(a) each later turn starts at least its drawn pause (virtual; pause / K on the client's clock)
    after the previous turn of its conversation ended, and the pause is the seeded draw;
(b) the pause lies between the previous reply and the request's start, so no TTFT, TPOT or
    latency contains it;
(c) the server saw it: in its own request log (`repro sim serve --request-log`, virtual
    seconds), each later turn arrived at least the drawn pause after the previous turn of its
    conversation finished; and the cached prompt tokens it reported for every request, which
    the client stored per request (`server_cached_tokens`), are its own cache's count: after
    the pause, turn t >= 2 found the whole history the engine had cached for turn t - 1.

Why (c) holds whatever the load: the engine ends a step at virtual time `end` no earlier than
the wall clock reaches it, the client reads the reply after that, sleeps pause / K and sends;
the engine stamps an arrival with its virtual clock (wall x K) when it admits the request, so
arrival - end >= pause.
"""

from __future__ import annotations

import pytest
from support.think_time import check_think_time_run, usage_by_request

from harness.analysis.request_table import read_table
from harness.dataset.thinktime import PauseTable, ThinkTime
from harness.results import load_run
from harness.run.sweep import SweepRequest, run_sweep
from harness.serve.server import free_port
from harness.sim.serve.server import read_request_log

K = 10.0
THINK = ThinkTime(kind="exponential", mean_s=2.0, seed=7)
SLACK_S = 0.002  # asyncio.sleep may wake a hair early on a coarse clock (wall seconds)
BLOCK = 64  # hisparse384's KV block, in tokens


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("think-simhttp")
    log = root / "server-requests.jsonl"
    run_dir = run_sweep(
        SweepRequest(
            profile="hisparse384",
            engine="sim",
            time_scale=K,
            dataset="cpu-tiny",
            overrides=[
                "sweep.points=[[2,4]]",
                "sweep.dataset_offset=0",
                "sweep.scrape_interval_s=2",
                "sweep.warmup_requests=0",
                "sweep.think_time={kind: exponential, mean_s: 2.0, seed: 7}",
                "sweep.slo=ttft=60s,tpot=5s",
            ],
            out=root,
            run_id="think-simhttp",
            port=free_port(),
            sim_args=["--request-log", str(log)],
        ),
        echo=lambda _m: None,
    )
    return run_dir, read_request_log(log)


def test_client_pauses_between_turns_and_never_inside_a_request(run):
    run_dir, _server = run
    loaded = load_run(run_dir)
    assert loaded.manifest.engine == "sim" and loaded.manifest.time_scale == K
    (point,) = loaded.points
    assert point.valid, point.invalid_reasons
    assert point.client.total_requests == 16 and point.client.failed_requests == 0
    check_think_time_run(run_dir, point, THINK, turns=4, time_scale=K)


def test_the_server_saw_each_pause_and_its_cache_survived_it(run):
    run_dir, server = run
    (point,) = load_run(run_dir).points
    from harness.client.thinktime import read_log

    log = run_dir / "points" / point.point_id / "evalscope" / "think_time.jsonl"
    pauses = read_log(log)
    asked = {(e["key"], e["turn"]) for e in read_log(log, "usage")}
    draws = PauseTable(THINK)
    # the client's requests among the server's (the harness's readiness probe is another)
    mine = [e for e in server if (e["key"], e["turn"]) in asked]
    by_request = {(e["key"], e["turn"]): e for e in mine}
    assert len(by_request) == len(mine) == len(asked) == 16  # each request once, no retries
    for entry in pauses:
        key, turn = entry["key"], entry["turn"]
        assert entry["pause_s"] == draws.pause(entry["conversation"], turn)
        before, after = by_request[(key, turn - 1)], by_request[(key, turn)]
        # (c) idle on the server for at least the drawn (virtual) pause
        assert after["arrival_s"] - before["end_s"] >= entry["pause_s"] - SLACK_S * K
        # the history the engine cached for the previous turn, in full blocks, was still there
        # (all but the last, which the MTP drafter recomputes: vLLM's drop_eagle_block)
        history = before["prompt_tokens"] + before["output_tokens"]
        assert after["cached_tokens"] == (history // BLOCK - 1) * BLOCK > 0
    # the usage chunk carried the engine's count, and the client kept it per request
    client = usage_by_request(run_dir, point)
    assert client == {k: e["cached_tokens"] for k, e in by_request.items()}
    assert all(client[(k, 1)] == 0 for k, _t in client)  # first turns: nothing cached yet


def test_the_per_turn_figure_uses_the_servers_cached_tokens(run):
    from harness.report.per_turn import SERVER_SOURCE, by_turn, cached_source, per_turn_figures

    run_dir, _server = run
    loaded = load_run(run_dir)
    (point,) = loaded.points
    table = read_table(run_dir / "points" / point.point_id / "requests.parquet")
    ok = table[table["success"]]
    assert cached_source(ok) == SERVER_SOURCE
    rows = by_turn(ok)
    t3 = ok[ok["turn"] == 3]
    assert rows.loc[3, "hit"] == pytest.approx(
        t3["server_cached_tokens"].sum() / t3["prompt_tokens"].sum()
    )
    figs = {fid: fig for fid, _c, fig in per_turn_figures([loaded])}
    (trace,) = figs["hit-turn"].data
    assert trace.meta == SERVER_SOURCE and "(server)" in trace.name
