"""EvalScope's per-request results (`benchmark_data.db`, table `result`, docs/evalscope.md §6) as
the project's :class:`harness.measurement.RequestRecord`: conversation and turn from each
request's messages, times on the client's `perf_counter` clock, pauses from the think-time
plugin's log (harness/client/thinktime.py)."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path
from typing import Any

from harness.analysis.request_table import first_turn_key
from harness.errors import RunError
from harness.measurement import RequestRecord

RESULTS_DB = "benchmark_data.db"

_QUERY = (
    "SELECT request, start_time, completed_time, first_chunk_latency, success, "
    "prompt_tokens, completion_tokens, inter_token_latencies FROM result ORDER BY start_time"
)


def _log_entries(path: Path | None) -> list[dict[str, Any]]:
    """The think-time plugin's log lines (a line cut short by a killed client is skipped)."""
    if path is None or not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            out.append(entry)
    return out


def _pauses(entries: list[dict[str, Any]]) -> dict[tuple[str, int], float]:
    """(conversation key, turn) -> pause, from the plugin's pause entries."""
    out: dict[tuple[str, int], float] = {}
    for entry in entries:
        if entry.get("kind", "pause") != "pause":
            continue
        try:
            out[(str(entry["key"]), int(entry["turn"]))] = float(entry["pause_s"])
        except (ValueError, KeyError, TypeError):
            continue
    return out


def _server_cached(entries: list[dict[str, Any]]) -> dict[float, int]:
    """Request start (EvalScope's perf_counter value, exact through JSON) -> the server's
    cached prompt tokens, from the plugin's usage entries (harness/client/thinktime.py)."""
    out: dict[float, int] = {}
    for entry in entries:
        if entry.get("kind") != "usage":
            continue
        start, cached = entry.get("start"), entry.get("server_cached_tokens")
        if isinstance(start, float) and isinstance(cached, int) and not isinstance(cached, bool):
            out[start] = cached
    return out


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _gaps(text: Any) -> tuple[float, ...]:
    try:
        return tuple(float(g) for g in json.loads(text or "[]"))
    except (TypeError, ValueError):
        return ()


def read_request_records(
    point_dir: Path, *, keys: dict[str, int] | None = None, think_log: Path | None = None
) -> list[RequestRecord]:
    """The requests of one point (its EvalScope output folder) in start order ([] when it wrote
    no results); a RunError naming the file when they cannot be read. ``keys``: first-turn key
    -> dataset index (`harness.analysis.request_table.dataset_keys`); a conversation not among
    them gets a negative index, the same for all its turns. Pauses and the server's cached
    tokens come from the think-time plugin's log, when it ran."""
    db = point_dir / RESULTS_DB
    if not db.exists():
        return []
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute(_QUERY).fetchall()
    except sqlite3.Error as exc:
        raise RunError(f"{db}: cannot read EvalScope's results ({exc})") from None
    finally:
        con.close()
    keys = keys or {}
    entries = _log_entries(think_log)
    pauses, server_cached = _pauses(entries), _server_cached(entries)
    unmatched: dict[str, int] = {}
    out = []
    for body, start, end, ttft, ok, prompt, completion, itl in rows:
        if start is None:
            continue
        try:
            messages = json.loads(body).get("messages") or []
        except (TypeError, ValueError, AttributeError):
            messages = []
        key = first_turn_key(messages)
        turn = 1 + sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
        conversation = keys[key] if key in keys else -1 - unmatched.setdefault(key, len(unmatched))
        out.append(
            RequestRecord(
                start=float(start),
                end=_finite(end),
                success=bool(ok),
                prompt_tokens=int(prompt) if prompt is not None else None,
                output_tokens=int(completion) if completion is not None else None,
                conversation=conversation,
                turn=turn,
                ttft=_finite(ttft) if ok else None,
                itl=_gaps(itl),
                think=pauses.get((key, turn)),
                server_cached=server_cached.get(float(start)),
            )
        )
    return out
