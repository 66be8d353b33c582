"""The per-request table of one point: one row per request (turn), kept as Parquet.

Written next to `point.json` as ``points/<id>/requests.parquet`` (columnar: a blog point is
832 rows, the report and `repro export` read a few columns of many points). Columns, all times
in seconds (already multiplied back by the time scale K of a simulated engine):

    conversation     dataset index of the conversation (-1 when it could not be matched)
    turn             1-based turn index (1 + assistant messages in the request's history)
    start_s          request sent, seconds after the point's first request
    end_s            last byte received (null when the request failed before any)
    ttft_s           time to first token (EvalScope 1.7: first chunk with choices)
    tpot_s           (latency - ttft) / (output_tokens - 1); null with <= 1 output token
    latency_s        end-to-end request latency
    itl_s            list of inter-chunk gaps of the request
    prompt_tokens    usage.prompt_tokens (the whole re-sent history)
    cached_tokens    EvalScope's estimate: previous turn's prompt + output tokens (0 on turn 1)
    server_cached_tokens  the server's own count, usage.prompt_tokens_details.cached_tokens
                     (vLLM sends it only with --enable-prompt-tokens-details; null when the
                     server gave none or the client did not record it: docs/metrics.md)
    output_tokens    usage.completion_tokens
    success          the request returned a complete stream
    think_s          the pause drawn before this turn (0 on turn 1; null: not recorded)
    gap_s            start of this turn - end of the previous turn of the conversation
    start_epoch      start_s on the epoch clock (null when the offset is unknown)

The rows come from a point's per-request records (`harness.analysis.point_table.table_rows`,
whichever client measured them); a client's `perf_counter` times are joined to the epoch through
the monotonic/epoch pair the harness records at child start.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from harness.errors import RunError

COLUMNS = (
    "conversation",
    "turn",
    "start_s",
    "end_s",
    "ttft_s",
    "tpot_s",
    "latency_s",
    "itl_s",
    "prompt_tokens",
    "cached_tokens",
    "server_cached_tokens",
    "output_tokens",
    "success",
    "think_s",
    "gap_s",
    "start_epoch",
)
TABLE_NAME = "requests.parquet"
# Columns added after tables were first written: a table without one reads as all null.
LATER_COLUMNS = ("server_cached_tokens",)


@dataclass
class RequestRow:
    """One request as a client saw it (absolute times on the client's monotonic clock)."""

    conversation: int
    turn: int
    start: float
    end: float | None
    ttft: float | None
    output_tokens: int | None
    prompt_tokens: int | None
    success: bool
    itl: list[float] = field(default_factory=list)
    think: float | None = None
    server_cached: int | None = None  # usage.prompt_tokens_details.cached_tokens, if sent


def first_turn_key(messages: Iterable[dict[str, Any]]) -> str:
    """A conversation's identity: the hash of its messages before the first assistant reply."""
    head = []
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "assistant":
            break
        head.append(message)
    text = json.dumps(head, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def dataset_keys(dataset_path: Path | None) -> dict[str, int]:
    """first_turn_key -> dataset index, from a built swe_smith JSON ({} when unreadable)."""
    if dataset_path is None:
        return {}
    try:
        data = json.loads(Path(dataset_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    keys: dict[str, int] = {}
    for index, conv in enumerate(data.get("conversations") or [] if isinstance(data, dict) else []):
        if conv and isinstance(conv[0], dict):
            keys.setdefault(first_turn_key(conv[0].get("messages") or []), index)
    return keys


def _tpot(row: RequestRow) -> float | None:
    if row.end is None or row.ttft is None or not row.output_tokens or row.output_tokens <= 1:
        return None
    return (row.end - row.start - row.ttft) / (row.output_tokens - 1)


def build_table(
    rows: list[RequestRow], *, time_scale: float = 1.0, epoch_offset: float | None = None
) -> pd.DataFrame:
    """The point's table (module docstring) from client rows; times x ``time_scale``."""
    k = float(time_scale)
    t0 = min((r.start for r in rows), default=0.0)
    ordered = sorted(rows, key=lambda r: (r.conversation, r.turn, r.start))
    previous: dict[int, RequestRow] = {}
    records = []
    for row in ordered:
        before = previous.get(row.conversation)
        cached = 0
        if row.turn > 1 and before is not None:
            cached = (before.prompt_tokens or 0) + (before.output_tokens or 0)
        gap = (row.start - before.end) * k if before and before.end is not None else None
        tpot = _tpot(row)
        records.append(
            {
                "conversation": row.conversation,
                "turn": row.turn,
                "start_s": (row.start - t0) * k,
                "end_s": (row.end - t0) * k if row.end is not None else None,
                "ttft_s": row.ttft * k if row.ttft is not None else None,
                "tpot_s": tpot * k if tpot is not None else None,
                "latency_s": (row.end - row.start) * k if row.end is not None else None,
                "itl_s": [g * k for g in row.itl],
                "prompt_tokens": row.prompt_tokens,
                "cached_tokens": cached if row.success else None,
                "server_cached_tokens": row.server_cached if row.success else None,
                "output_tokens": row.output_tokens,
                "success": bool(row.success),
                "think_s": 0.0 if row.turn == 1 else row.think,
                "gap_s": gap,
                "start_epoch": row.start + epoch_offset if epoch_offset is not None else None,
            }
        )
        previous[row.conversation] = row
    frame = pd.DataFrame.from_records(records, columns=list(COLUMNS))
    for name in ("conversation", "turn"):
        frame[name] = frame[name].astype("int64")
    for name in ("prompt_tokens", "cached_tokens", "server_cached_tokens", "output_tokens"):
        frame[name] = frame[name].astype("Int64")
    for name in ("start_s", "end_s", "ttft_s", "tpot_s", "latency_s", "think_s", "gap_s"):
        frame[name] = frame[name].astype("float64")
    frame["start_epoch"] = frame["start_epoch"].astype("float64")
    frame["success"] = frame["success"].astype("bool")
    return frame.sort_values(["start_s", "conversation", "turn"], kind="stable").reset_index(
        drop=True
    )


def write_table(path: Path, frame: pd.DataFrame) -> None:
    """Parquet, atomically (temp file + rename)."""
    tmp = path.with_name(f".{path.name}.tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        frame.to_parquet(tmp, engine="pyarrow", index=False)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def read_table(path: Path) -> pd.DataFrame:
    """A point's table; a RunError naming the file when it is missing or not Parquet."""
    if not path.exists():
        raise RunError(f"{path}: missing (the point has no per-request table)")
    try:
        frame = pd.read_parquet(path, engine="pyarrow")
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several unrelated types
        raise RunError(f"{path}: not a per-request table ({type(exc).__name__}: {exc})") from None
    for name in LATER_COLUMNS:
        if name not in frame.columns:
            frame[name] = pd.Series([pd.NA] * len(frame), dtype="Int64")
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise RunError(f"{path}: missing columns {', '.join(missing)}")
    return frame
