"""The think-time checks (a) and (b) on a finished run, shared by the fake-server client test
(tests/client) and the real-vLLM test (tests/e2e): recorded timestamps only, never wall-clock
bounds on the machine's speed."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.analysis.request_table import first_turn_key, read_table
from harness.cli import cli
from harness.client.thinktime import read_log
from harness.dataset.thinktime import PauseTable, ThinkTime

SLACK_S = 0.002  # asyncio.sleep may wake a hair early on a coarse clock


def check_think_time_run(
    run_dir: Path, point, think: ThinkTime, turns: int, time_scale: float = 1.0
) -> None:
    """(a) each later turn starts at least its drawn pause after the previous one ended;
    (b) the pause lies between that end and the request's start, so no request's TTFT, TPOT or
    latency (all measured from the start) contains it. Under a simulated engine K x faster than
    the wall (`time_scale`), the client sleeps pause / K on its own clock; the per-request
    table's times are virtual (x K)."""
    k = time_scale
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
    assert len(requests) == point.number * turns
    draws = PauseTable(think)
    assert sorted(e["turn"] for e in log) == sorted(list(range(2, turns + 1)) * point.number)
    assert {e["conversation"] for e in log} == set(point.conversations)
    for entry in log:
        prev_end = requests[(entry["key"], entry["turn"] - 1)][1]
        start, end, ttft, latency, tpot, tokens = requests[(entry["key"], entry["turn"])]
        assert entry["pause_s"] == draws.pause(entry["conversation"], entry["turn"])
        # (a) separated by at least the drawn pause
        assert start - prev_end >= entry["pause_s"] / k - SLACK_S
        # (b) the pause is over before the request starts; its times are measured from there
        assert prev_end <= entry["sleep_start"] < entry["sleep_end"] <= start
        assert entry["sleep_end"] - entry["sleep_start"] >= entry["pause_s"] / k - SLACK_S
        assert latency == pytest.approx(end - start, abs=1e-6)
        if tokens and tokens > 1:
            assert tpot == pytest.approx((latency - ttft) / (tokens - 1), rel=1e-6)
    table = read_table(pdir / "requests.parquet")
    later = table[table["turn"] > 1]
    assert sorted(later["think_s"]) == sorted(e["pause_s"] for e in log)
    assert (later["gap_s"] >= later["think_s"] - SLACK_S * k).all()


def check_report_and_claims(run_dir: Path, tmp_path: Path, arm_profile: str, parallel: int) -> None:
    """The report draws the per-turn figures; `claims check` gates on the objectives."""
    report = tmp_path / "report.html"
    out = CliRunner().invoke(cli, ["report", str(run_dir), "--out", str(report)])
    assert out.exit_code == 0, out.output
    html = report.read_text()
    assert "TTFT by turn index" in html and "TTFT CDF" in html
    claims = tmp_path / "goodput.yaml"
    text = (
        f"arms:\n  arm: {{profiles: [{arm_profile}]}}\nclaims:\n"
        "  - id: meets-slo\n"
        "    left: {arm: arm, point: slo, field: parallel}\n"
        f"    op: '>='\n    value: {parallel}\n"
        "  - id: goodput\n"
        f"    left: {{arm: arm, point: c{parallel}, metric: goodput_rps}}\n"
        "    op: '>'\n    value: 0\n"
    )
    claims.write_text(text)
    held = CliRunner().invoke(cli, ["claims", "check", str(run_dir), "--claims", str(claims)])
    assert held.exit_code == 0, held.output
    claims.write_text(text.replace(f"value: {parallel}\n", f"value: {2 * parallel}\n"))
    failed = CliRunner().invoke(cli, ["claims", "check", str(run_dir), "--claims", str(claims)])
    assert failed.exit_code == 1, failed.output
    assert "meets-slo" in failed.output


def usage_by_request(run_dir: Path, point) -> dict[tuple[str, int], int | None]:
    """(conversation key, turn) -> the server's cached prompt tokens as the plugin logged them
    (one usage line per request); checks that the per-request table stored the same values."""
    pdir = run_dir / "points" / point.point_id
    usage = read_log(pdir / "evalscope" / "think_time.jsonl", "usage")
    assert len(usage) == point.client.total_requests
    by_request = {(e["key"], e["turn"]): e["server_cached_tokens"] for e in usage}
    assert len(by_request) == len(usage)  # one line per request
    table = read_table(pdir / "requests.parquet")
    stored = sorted(int(v) for v in table["server_cached_tokens"].dropna())
    assert stored == sorted(v for v in by_request.values() if v is not None)
    return by_request
