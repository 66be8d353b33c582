"""The per-request table from a crafted EvalScope 1.7 `benchmark_data.db` (its real schema)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from harness.analysis.point_table import keep_request_table, table_rows
from harness.analysis.request_table import (
    COLUMNS,
    dataset_keys,
    read_table,
)
from harness.client.request_records import read_request_records
from harness.errors import RunError


def evalscope_rows(point_dir, keys=None, think_log=None):
    """The table rows of a point's EvalScope results, read by the client adapter."""
    return table_rows(read_request_records(point_dir, keys=keys, think_log=think_log))


# EvalScope 1.7's `result` table (perf/utils/db_util.py, create_result_table)
SCHEMA = """CREATE TABLE result(request TEXT, start_time REAL, inter_token_latencies TEXT,
 success INTEGER, response_messages TEXT, completed_time REAL, latency REAL,
 first_chunk_latency REAL, prompt_tokens INTEGER, completion_tokens INTEGER,
 max_gpu_memory_cost REAL, time_per_output_token REAL)"""


def first_turns(n: int) -> list[list[dict]]:
    return [
        [{"role": "system", "content": "pad"}, {"role": "user", "content": f"task {c}"}]
        for c in range(n)
    ]


def write_dataset(path: Path, n: int = 3) -> Path:
    convs = [
        [{"messages": first}, {"messages": [{"role": "user", "content": "next"}]}]
        for first in first_turns(n)
    ]
    path.write_text(json.dumps({"conversations": convs}), encoding="utf-8")
    return path


def write_db(point_dir: Path, requests: list[dict]) -> None:
    """requests: conv, turn, start, ttft, latency, prompt, out, ok."""
    point_dir.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(point_dir / "benchmark_data.db")
    con.execute(SCHEMA)
    heads = first_turns(10)
    for r in requests:
        messages = list(heads[r["conv"]])
        for _ in range(r["turn"] - 1):
            messages += [
                {"role": "assistant", "content": "w w"},
                {"role": "user", "content": "next"},
            ]
        body = json.dumps({"model": "tiny", "messages": messages, "stream": True})
        gaps = [0.0] + [(r["latency"] - r["ttft"]) / (r["out"] - 1)] * (r["out"] - 1)
        if r.get("ok", True):
            con.execute(
                "INSERT INTO result VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (body, r["start"], json.dumps(gaps), 1, "", r["start"] + r["latency"],
                 r["latency"], r["ttft"], r["prompt"], r["out"], 0.0, 0.01),
            )  # fmt: skip
        else:
            con.execute(
                "INSERT INTO result (request, start_time, inter_token_latencies, success, "
                "response_messages, completed_time) VALUES (?,?,?,?,?,?)",
                (body, r["start"], "[]", 0, "", r["start"] + 0.1),
            )
    con.commit()
    con.close()


REQUESTS = [
    {"conv": 1, "turn": 1, "start": 50.0, "ttft": 0.5, "latency": 1.0, "prompt": 100, "out": 6},
    {"conv": 2, "turn": 1, "start": 50.2, "ttft": 0.6, "latency": 1.1, "prompt": 120, "out": 6},
    {"conv": 1, "turn": 2, "start": 53.0, "ttft": 0.2, "latency": 0.7, "prompt": 130, "out": 6},
    {"conv": 2, "turn": 2, "start": 51.3, "ttft": 0.2, "latency": 0.7, "prompt": 150, "out": 6,
     "ok": False},
]  # fmt: skip


def test_rows_carry_dataset_conversation_turn_and_gaps(tmp_path):
    ev = tmp_path / "ev"
    write_db(ev, REQUESTS)
    log = tmp_path / "think_time.jsonl"
    from harness.analysis.request_table import first_turn_key

    key1 = first_turn_key(first_turns(3)[1])
    log.write_text(json.dumps({"key": key1, "turn": 2, "pause_s": 2.0}) + "\n")
    keys = dataset_keys(write_dataset(tmp_path / "ds.json"))
    rows = evalscope_rows(ev, keys, log)
    point_dir = tmp_path / "point"
    metrics = keep_request_table(point_dir, rows, {"p99_ttft_ms": 555.0}, slo="ttft=550ms")
    table = read_table(point_dir / "requests.parquet")
    assert list(table.columns) == list(COLUMNS)
    by = {(int(r.conversation), int(r.turn)): r for r in table.itertuples()}
    assert set(by) == {(1, 1), (2, 1), (1, 2), (2, 2)}
    assert by[(1, 1)].start_s == 0.0 and by[(2, 1)].start_s == pytest.approx(0.2)
    assert by[(1, 2)].gap_s == pytest.approx(53.0 - 51.0)  # after turn 1 ended at 51.0
    assert by[(1, 2)].think_s == 2.0  # the plugin's logged pause
    assert pd_isna(by[(2, 2)].think_s)  # nothing logged: unknown, not 0
    assert by[(1, 1)].think_s == 0.0
    # EvalScope's cache estimate: previous prompt + previous output
    assert by[(1, 2)].cached_tokens == 106 and by[(1, 1)].cached_tokens == 0
    assert by[(1, 2)].tpot_s == pytest.approx(0.1)
    assert not by[(2, 2)].success and pd_isna(by[(2, 2)].ttft_s)
    # EvalScope's own p99 row is kept; the table adds the rest
    assert metrics["p99_ttft_ms"] == 555.0
    assert metrics["p50_ttft_ms"] == pytest.approx(500.0)  # 0.2, 0.5, 0.6 -> index 1
    assert metrics["slo_attainment"] == pytest.approx(2 / 4)  # 0.5 and 0.2 meet; 0.6, failed
    assert metrics["goodput_rps"] == pytest.approx(2 / (53.7 - 50.0))


def pd_isna(value) -> bool:
    import pandas as pd

    return bool(pd.isna(value))


def test_unmatched_conversations_get_negative_ordinals(tmp_path):
    ev = tmp_path / "ev"
    write_db(ev, REQUESTS)
    rows = evalscope_rows(ev, {})
    assert sorted({r.conversation for r in rows}) == [-2, -1]


def test_time_scale_multiplies_times(tmp_path):
    ev = tmp_path / "ev"
    write_db(ev, REQUESTS[:1])
    keep_request_table(tmp_path / "p", evalscope_rows(ev), {}, slo=None, time_scale=10.0)
    table = read_table(tmp_path / "p" / "requests.parquet")
    assert table["ttft_s"].iloc[0] == pytest.approx(5.0)
    assert table["latency_s"].iloc[0] == pytest.approx(10.0)


def test_bad_table_file_is_named(tmp_path):
    bad = tmp_path / "requests.parquet"
    bad.write_text("not parquet")
    with pytest.raises(RunError, match="requests.parquet: not a per-request table"):
        read_table(bad)
    with pytest.raises(RunError, match="missing"):
        read_table(tmp_path / "none.parquet")
