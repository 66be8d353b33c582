"""EvalScope 1.7's outputs of one point (a crafted `benchmark_data.db` in its real schema, its
summary and percentile files) read into the project's Measurement, and the one set of
validity rules every engine's points go through."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest

from harness.analysis.metrics import derive_point_metrics
from harness.analysis.point_table import keep_measurement_table
from harness.analysis.request_table import dataset_keys, first_turn_key, read_table
from harness.analysis.validity import invalid_reasons
from harness.client.evalscope import read_measurement
from harness.measurement import Measurement, RequestRecord, Sample
from harness.results import ClientSummary

# EvalScope 1.7's `result` table (perf/utils/db_util.py, create_result_table)
SCHEMA = """CREATE TABLE result(request TEXT, start_time REAL, inter_token_latencies TEXT,
 success INTEGER, response_messages TEXT, completed_time REAL, latency REAL,
 first_chunk_latency REAL, prompt_tokens INTEGER, completion_tokens INTEGER,
 max_gpu_memory_cost REAL, time_per_output_token REAL)"""

SUMMARY = {
    "Test Duration (s)": 4.0,
    "Concurrency": 2,
    "Total Requests": 4,
    "Success Requests": 3,
    "Failed Requests": 1,
    "Req Throughput (req/s)": 0.75,
    "Avg Latency (s)": 0.9,
    "Output Throughput (tok/s)": 4.5,
    "Total Throughput (tok/s)": 100.0,
    "TTFT (ms)": 433.3,
    "TPOT (ms)": 80.0,
    "ITL (ms)": 70.0,
}
PERCENTILES = [
    {"Percentiles": "50%", "TTFT (ms)": 500.0, "TPOT (ms)": 80.0, "Latency (s)": 0.7},
    {"Percentiles": "90%", "TTFT (ms)": 600.0, "TPOT (ms)": 100.0, "Latency (s)": 1.1},
    {"Percentiles": "99%", "TTFT (ms)": 600.0, "TPOT (ms)": 100.0, "ITL (ms)": float("nan")},
]
# conv, turn, start, ttft, latency, prompt, out, ok
REQUESTS = [
    (1, 1, 50.0, 0.5, 1.0, 100, 6, True),
    (2, 1, 50.2, 0.6, 1.1, 120, 6, True),
    (1, 2, 53.0, 0.2, 0.7, 130, 6, True),
    (2, 2, 51.3, None, None, None, None, False),
]


def first_turn(conv: int) -> list[dict]:
    return [{"role": "system", "content": "pad"}, {"role": "user", "content": f"task {conv}"}]


def write_point(ev: Path, requests=REQUESTS, summary=SUMMARY) -> None:
    ev.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(ev / "benchmark_data.db")
    con.execute(SCHEMA)
    for conv, turn, start, ttft, latency, prompt, out, ok in requests:
        messages = first_turn(conv)
        for _ in range(turn - 1):
            messages += [{"role": "assistant", "content": "w"}, {"role": "user", "content": "n"}]
        body = json.dumps({"model": "tiny", "messages": messages, "stream": True})
        if ok:
            gaps = [ttft] + [(latency - ttft) / (out - 1)] * (out - 1)
            con.execute(
                "INSERT INTO result VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (body, start, json.dumps(gaps), 1, "", start + latency,
                 latency, ttft, prompt, out, 0.0, 0.01),
            )  # fmt: skip
        else:  # EvalScope writes only the common columns of a failed request
            con.execute(
                "INSERT INTO result (request, start_time, inter_token_latencies, success, "
                "response_messages, completed_time) VALUES (?,?,?,?,?,?)",
                (body, start, "[]", 0, "", start + 0.1),
            )
    con.commit()
    con.close()
    if summary is not None:
        (ev / "benchmark_summary.json").write_text(json.dumps(summary))
    (ev / "benchmark_percentile.json").write_text(json.dumps(PERCENTILES))


def write_dataset(path: Path) -> Path:
    convs = [[{"messages": first_turn(c)}, {"messages": [{"role": "user"}]}] for c in range(3)]
    path.write_text(json.dumps({"conversations": convs}), encoding="utf-8")
    return path


SAMPLES = (Sample(1.0, 50.0, "vllm:num_requests_running", {}, 2.0),)


def test_requests_carry_conversation_turn_times_and_pauses(tmp_path):
    ev = tmp_path / "ev"
    write_point(ev)
    log = tmp_path / "think_time.jsonl"
    log.write_text(json.dumps({"key": first_turn_key(first_turn(1)), "turn": 2, "pause_s": 2.0}))
    m = read_measurement(ev, samples=list(SAMPLES), dataset=write_dataset(tmp_path / "d.json"),
                         think_log=log)  # fmt: skip
    assert dataset_keys(tmp_path / "d.json")  # the dataset is what matched the conversations
    by = {(r.conversation, r.turn): r for r in m.requests}
    assert [(r.conversation, r.turn) for r in m.requests] == [(1, 1), (2, 1), (2, 2), (1, 2)]
    first = by[(1, 1)]
    assert (first.start, first.end, first.ttft) == (50.0, 51.0, 0.5)
    assert first.latency == 1.0 and first.tpot == pytest.approx(0.1)
    assert first.itl == pytest.approx((0.5, 0.1, 0.1, 0.1, 0.1, 0.1))
    assert (first.prompt_tokens, first.output_tokens, first.success) == (100, 6, True)
    assert by[(1, 2)].think == 2.0 and by[(2, 2)].think is None  # not logged: unknown
    failed = by[(2, 2)]
    assert not failed.success and failed.ttft is None and failed.output_tokens is None
    assert failed.end == pytest.approx(51.4)  # the client's completed_time, kept for the window
    assert m.window == (50.0, 53.7)
    assert m.client is not None and m.client.failed_requests == 1
    assert m.client_name == "EvalScope" and m.problems == () and m.notes == ()


def test_percentiles_are_typed_fields(tmp_path):
    ev = tmp_path / "ev"
    write_point(ev)
    p = read_measurement(ev).percentiles
    assert (p.ttft_ms.p50, p.ttft_ms.p90, p.ttft_ms.p99) == (500.0, 600.0, 600.0)
    assert (p.latency_s.p50, p.latency_s.p90, p.latency_s.p99) == (0.7, 1.1, None)
    assert p.itl_ms.p50 is None and math.isnan(p.itl_ms.p99)  # as EvalScope wrote it


def test_unmatched_conversations_get_negative_ordinals(tmp_path):
    ev = tmp_path / "ev"
    write_point(ev)
    assert sorted({r.conversation for r in read_measurement(ev).requests}) == [-2, -1]


def test_time_scale_multiplies_client_times_but_not_the_request_clock(tmp_path):
    ev = tmp_path / "ev"
    write_point(ev)
    m = read_measurement(ev, samples=list(SAMPLES), time_scale=4.0, epoch_offset=1000.0)
    assert m.client.duration_s == 16.0 and m.client.mean_ttft_ms == pytest.approx(4 * 433.3)
    assert m.client.total_throughput == 25.0 and m.client.raw["repro_time_scale"] == 4.0
    assert m.percentiles.tpot_ms.p99 == 400.0
    assert m.requests[0].start == 50.0  # joins the samples' monotonic clock
    metrics = keep_measurement_table(tmp_path / "p", m, {}, slo=None)
    table = read_table(tmp_path / "p" / "requests.parquet")
    row = table[(table.conversation == -1) & (table.turn == 1)].iloc[0]
    assert row.ttft_s == pytest.approx(2.0) and row.latency_s == pytest.approx(4.0)
    assert row.start_epoch == pytest.approx(1050.0)
    assert metrics["p50_ttft_ms"] == pytest.approx(2000.0)  # 0.2, 0.5, 0.6 -> index 1, x 4


def test_the_table_from_a_measurement_holds_every_request(tmp_path):
    ev = tmp_path / "ev"
    write_point(ev)
    m = read_measurement(ev, dataset=write_dataset(tmp_path / "d.json"))
    metrics = keep_measurement_table(tmp_path / "p", m, {"p99_ttft_ms": 555.0}, slo="ttft=550ms")
    table = read_table(tmp_path / "p" / "requests.parquet")
    by = {(int(r.conversation), int(r.turn)): r for r in table.itertuples()}
    assert by[(1, 2)].gap_s == pytest.approx(2.0) and by[(1, 2)].cached_tokens == 106
    failed = by[(2, 2)]
    assert not failed.success and math.isnan(failed.end_s) and math.isnan(failed.ttft_s)
    assert metrics["p99_ttft_ms"] == 555.0  # the client's own p99 is kept
    assert metrics["slo_attainment"] == pytest.approx(2 / 4)


def test_unreadable_files_are_a_problem_or_a_note(tmp_path):
    ev = tmp_path / "ev"
    ev.mkdir()
    (ev / "benchmark_data.db").write_bytes(b"not a database at all" * 100)
    m = read_measurement(ev, samples=list(SAMPLES))
    assert m.requests == () and m.client is None
    assert len(m.notes) == 1 and "benchmark_data.db: cannot read EvalScope's results" in m.notes[0]
    assert len(m.problems) == 1 and "benchmark_summary.json: missing" in m.problems[0]
    assert invalid_reasons(m, conversations=2, turns=2) == list(m.problems)
    assert keep_measurement_table(tmp_path / "p", m, {"x": 1.0}, slo=None) == {"x": 1.0}
    assert not (tmp_path / "p" / "requests.parquet").exists()


def summary(total: int, ok: int, **extra) -> ClientSummary:
    return ClientSummary(total_requests=total, success_requests=ok, failed_requests=total - ok,
                         duration_s=1.0, concurrency=1, **extra)  # fmt: skip


def test_validity_rules_name_every_reason(tmp_path):
    ev = tmp_path / "ev"
    write_point(ev)
    m = read_measurement(ev, samples=list(SAMPLES))
    assert invalid_reasons(m, conversations=2, turns=2) == [
        "EvalScope reported 1 failed requests",
        "success requests 3 != 4",
    ]
    assert invalid_reasons(m, conversations=3, turns=2) == [
        "EvalScope reported 1 failed requests",
        "total requests 4 != 3 conversations x 2 turns = 6",
    ]
    clean = Measurement("EvalScope", samples=SAMPLES, client=summary(4, 4))
    assert invalid_reasons(clean, conversations=2, turns=2) == []
    sentinel = Measurement("EvalScope", samples=SAMPLES,
                           client=summary(4, 4, sentinels=["mean_tpot_ms=-1000"]))  # fmt: skip
    assert invalid_reasons(sentinel, conversations=2, turns=2) == [
        "EvalScope reported no measurement for mean_tpot_ms=-1000 (stored as null)"
    ]
    unscraped = Measurement("EvalScope", client=summary(4, 4))
    assert invalid_reasons(unscraped, conversations=2, turns=2) == [
        "no /metrics sample in the point's window"
    ]


def test_failed_requests_that_say_why_are_named_by_their_cause():
    requests = (
        RequestRecord(0.0, 1.0, True),
        RequestRecord(1.0, 1.0, False, error="prompt too long"),
    )
    m = Measurement("the simulated client", requests=requests, samples=SAMPLES,
                    client=summary(2, 1))  # fmt: skip
    assert invalid_reasons(m, conversations=1, turns=2) == [
        "1 failed requests (prompt too long)",
        "success requests 1 != 2",
    ]


def test_metrics_come_from_the_measurement_only(tmp_path):
    ev = tmp_path / "ev"
    write_point(ev)
    m = read_measurement(ev, samples=list(SAMPLES))
    out = derive_point_metrics(m, parallel=2, gpus=2).metrics
    assert out["interactivity"] == pytest.approx(1000.0 / 80.0)
    assert out["throughput_per_gpu"] == 50.0
    assert (out["p99_ttft_ms"], out["p99_tpot_ms"]) == (600.0, 100.0)
    assert out["occupancy"] == 2.0
    assert out["client_in_flight_mean"] == pytest.approx((1.0 + 1.1 + 0.7 + 0.1) / 3.7)
