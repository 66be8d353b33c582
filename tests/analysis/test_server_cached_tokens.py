"""The server's cached prompt tokens per request (`server_cached_tokens` of requests.parquet):
joined from the think-time plugin's usage lines onto EvalScope 1.7's sqlite rows by their
exact start time; null where the server sent none; an older table without the column reads
as all null."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pandas as pd

from harness.analysis.point_table import keep_request_table, table_rows
from harness.analysis.request_table import (
    COLUMNS,
    TABLE_NAME,
    first_turn_key,
    read_table,
)
from harness.client.request_records import read_request_records
from harness.client.thinktime import read_log


def evalscope_rows(point_dir, keys=None, think_log=None):
    """The table rows of a point's EvalScope results, read by the client adapter."""
    return table_rows(read_request_records(point_dir, keys=keys, think_log=think_log))


# EvalScope 1.7's `result` table (perf/utils/db_util.py, create_result_table)
SCHEMA = """CREATE TABLE result(request TEXT, start_time REAL, inter_token_latencies TEXT,
 success INTEGER, response_messages TEXT, completed_time REAL, latency REAL,
 first_chunk_latency REAL, prompt_tokens INTEGER, completion_tokens INTEGER,
 max_gpu_memory_cost REAL, time_per_output_token REAL)"""

HEAD = [{"role": "system", "content": "pad"}, {"role": "user", "content": "task"}]
# perf_counter-like starts with many digits: the join must be exact, not rounded
STARTS = (1234.567890123457, 1236.0000000001, 1239.3333333333333)


def _messages(turn: int) -> list[dict[str, str]]:
    out = list(HEAD)
    for _ in range(turn - 1):
        out += [{"role": "assistant", "content": "w w"}, {"role": "user", "content": "next"}]
    return out


def _write(ev: Path, log: Path, cached: tuple[int | None, ...]) -> None:
    ev.mkdir(parents=True)
    con = sqlite3.connect(ev / "benchmark_data.db")
    con.execute(SCHEMA)
    with open(log, "w", encoding="utf-8") as out:
        for turn, (start, n) in enumerate(zip(STARTS, cached, strict=True), start=1):
            body = json.dumps({"messages": _messages(turn), "stream": True})
            con.execute(
                "INSERT INTO result VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (body, start, "[0.0, 0.1]", 1, "", start + 1.0, 1.0, 0.4, 100 * turn, 3, 0, 0.3),
            )
            key = first_turn_key(HEAD)
            if turn > 1:  # a pause line, as the plugin writes it before the request
                pause = {"kind": "pause", "key": key, "turn": turn, "pause_s": 0.5}
                out.write(json.dumps(pause) + "\n")
            usage = {"kind": "usage", "key": key, "turn": turn, "start": start}
            out.write(json.dumps({**usage, "server_cached_tokens": n}) + "\n")
    con.commit()
    con.close()


def test_server_cached_tokens_join_on_the_exact_start(tmp_path: Path) -> None:
    ev, log = tmp_path / "ev", tmp_path / "think_time.jsonl"
    _write(ev, log, (0, 192, None))
    assert [e["turn"] for e in read_log(log)] == [2, 3]  # pauses only by default
    assert [e["server_cached_tokens"] for e in read_log(log, "usage")] == [0, 192, None]
    rows = evalscope_rows(ev, {}, log)
    assert [(r.turn, r.server_cached, r.think) for r in rows] == [
        (1, 0, None),
        (2, 192, 0.5),
        (3, None, 0.5),
    ]
    point = tmp_path / "point"
    keep_request_table(point, rows, {}, slo=None)
    table = read_table(point / TABLE_NAME)
    assert list(table.columns) == list(COLUMNS)
    assert str(table["server_cached_tokens"].dtype) == "Int64"
    by_turn = table.set_index("turn")
    assert by_turn.loc[2, "server_cached_tokens"] == 192
    assert pd.isna(by_turn.loc[3, "server_cached_tokens"])  # the server sent none: unknown
    # the client's estimate is kept beside it: previous prompt + previous output
    assert by_turn.loc[2, "cached_tokens"] == 100 + 3


def test_without_the_plugin_log_the_column_is_null(tmp_path: Path) -> None:
    ev, log = tmp_path / "ev", tmp_path / "unused.jsonl"
    _write(ev, log, (5, 6, 7))
    rows = evalscope_rows(ev, {}, None)
    assert [r.server_cached for r in rows] == [None, None, None]


def test_a_table_written_before_the_column_reads_as_null(tmp_path: Path) -> None:
    ev, log = tmp_path / "ev", tmp_path / "think_time.jsonl"
    _write(ev, log, (0, 64, 128))
    point = tmp_path / "point"
    keep_request_table(point, evalscope_rows(ev, {}, log), {}, slo=None)
    old = pd.read_parquet(point / TABLE_NAME).drop(columns=["server_cached_tokens"])
    old.to_parquet(point / TABLE_NAME, index=False)
    table = read_table(point / TABLE_NAME)
    assert table["server_cached_tokens"].isna().all() and len(table) == 3
