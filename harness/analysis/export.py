"""A run in other tools' formats, from its points' per-request tables (`repro export`).

``csv`` - one row per request of every point, the per-request table's columns (see
    harness/analysis/request_table.py) after these point columns:

    run_id, point_id, label, parallel (the configured concurrency), number (conversations),
    repeat, valid; ``itl_s`` is a JSON list of seconds.

``vllm-bench`` - JSON Lines, one object per point, with the keys `vllm bench serve
    --save-result --append-result` writes (so a `vllm bench` dashboard or notebook that reads
    those files reads these). Field by field:

    date             the point's start, UTC, ``%Y%m%d-%H%M%S`` (vllm's own format)
    backend          "openai-chat" (EvalScope sends /v1/chat/completions)
    label            ``<run_id>/<point label>`` (e.g. run-1/c8)
    model_id         the profile's model; tokenizer_id the same
    num_prompts      requests in the point (conversations x turns)
    request_rate     "inf" (closed loop: each worker sends its next turn when ready)
    burstiness       1.0; max_concurrency the point's `parallel`
    duration         first request sent to last byte received, s
    completed        successful requests; failed: the others
    total_input_tokens / total_output_tokens   sums over successful requests
    request_throughput, output_throughput, total_token_throughput   per second of duration
    request_goodput  requests meeting the objectives per second (null without objectives)
    input_lens, output_lens, ttfts (s), itls (list of s per request), errors ("" each)
    mean_/median_/std_/p50_/p90_/p99_ + ttft_ms, tpot_ms, itl_ms, e2el_ms   (ms)
    repro            extras vllm does not write: point_id, conversation and turn per
                     request, think_s per request, the objectives used

``guidellm`` - one JSON document in the shape of GuideLLM's ``benchmarks.json`` report: a
    ``benchmarks`` list with one ``generative_benchmark`` per point (``args.profile`` is a
    ``concurrent`` profile with ``streams: [parallel]``), whose ``metrics`` hold, for
    requests_per_second, request_concurrency, request_latency (s), prompt_token_count,
    output_token_count, time_to_first_token_ms, time_per_output_token_ms,
    inter_token_latency_ms, output_tokens_per_second and tokens_per_second, a status
    distribution (``successful``, ``errored``, ``incomplete``, ``total``), each a summary with
    mean, median, mode, variance, std_dev, min, max, count, total_sum and ``percentiles``
    p001 p01 p05 p10 p25 p50 p75 p90 p95 p99 p999; and ``requests.successful`` /
    ``requests.errored``: per request prompt_tokens, output_tokens, start_time, end_time,
    first_token_time (epoch s when the run recorded the clock offset, else point-relative),
    request_latency (s), time_to_first_token_ms, time_per_output_token_ms,
    inter_token_latency_ms. Per-second rates are over the point's duration; concurrency is
    the time-weighted number of requests in flight.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Sequence
from typing import Any

import pandas as pd

from harness.analysis.goodput import duration_s, meets, percentile
from harness.analysis.point_table import point_table
from harness.analysis.slo import Objectives
from harness.errors import RunError
from harness.results import PointRecord, Run, json_safe

FORMATS = ("vllm-bench", "guidellm", "csv")


def point_tables(run: Run) -> list[tuple[PointRecord, pd.DataFrame]]:
    """(point, table) of every finished point that kept a table; RunError when none did."""
    out = []
    for point in run.points:
        table = point_table(run.root, point.point_id)
        if table is not None:
            out.append((point, table))
    if not out:
        raise RunError(
            f"{run.root}: no point has a per-request table (points/<id>/requests.parquet); "
            "runs recorded before the table was kept cannot be exported"
        )
    return out


def _ok(table: pd.DataFrame) -> pd.DataFrame:
    return table[table["success"].astype(bool)]


def _floats(series: pd.Series) -> list[float]:
    return [float(v) for v in series.dropna().tolist()]


# --------------------------------------------------------------------------- csv


def to_csv(run: Run) -> str:
    frames = []
    for point, table in point_tables(run):
        frame = table.copy()
        frame["itl_s"] = frame["itl_s"].map(lambda gaps: json.dumps([float(g) for g in gaps]))
        head = {
            "run_id": run.name,
            "point_id": point.point_id,
            "label": point.label,
            "parallel": point.parallel,
            "number": point.number,
            "repeat": point.repeat,
            "valid": point.valid,
        }
        for position, (key, value) in enumerate(head.items()):
            frame.insert(position, key, value)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True).to_csv(index=False, lineterminator="\n")


# --------------------------------------------------------------------------- vllm bench


def _stats_ms(values: Sequence[float], name: str) -> dict[str, float | None]:
    ms = [v * 1000.0 for v in values]
    out: dict[str, float | None] = {
        f"mean_{name}_ms": statistics.fmean(ms) if ms else None,
        f"median_{name}_ms": statistics.median(ms) if ms else None,
        f"std_{name}_ms": statistics.pstdev(ms) if ms else None,
    }
    for p in (50, 90, 99):
        out[f"p{p}_{name}_ms"] = percentile(ms, p)
    return out


def vllm_bench_record(
    run: Run, point: PointRecord, table: pd.DataFrame, objectives: Objectives | None
) -> dict[str, Any]:
    ok = _ok(table)
    span = duration_s(table) or 0.0
    prompt = int(ok["prompt_tokens"].fillna(0).sum())
    output = int(ok["output_tokens"].fillna(0).sum())
    itl_lists = [[float(g) for g in gaps] for gaps in ok["itl_s"]]
    model = str(run.manifest.profile.get("model", ""))
    record: dict[str, Any] = {
        "date": time.strftime("%Y%m%d-%H%M%S", time.gmtime(point.started_at)),
        "backend": "openai-chat",
        "label": f"{run.name}/{point.label}",
        "model_id": model,
        "tokenizer_id": model,
        "num_prompts": len(table),
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": point.parallel,
        "duration": span,
        "completed": len(ok),
        "failed": len(table) - len(ok),
        "total_input_tokens": prompt,
        "total_output_tokens": output,
        "request_throughput": len(ok) / span if span else None,
        "request_goodput": (
            int(meets(table, objectives).sum()) / span if objectives and span else None
        ),
        "output_throughput": output / span if span else None,
        "total_token_throughput": (prompt + output) / span if span else None,
        "input_lens": [int(v) for v in ok["prompt_tokens"].fillna(0)],
        "output_lens": [int(v) for v in ok["output_tokens"].fillna(0)],
        "ttfts": _floats(ok["ttft_s"]),
        "itls": itl_lists,
        "errors": ["" for _ in range(len(ok))],
    }
    record.update(_stats_ms(_floats(ok["ttft_s"]), "ttft"))
    record.update(_stats_ms(_floats(ok["tpot_s"]), "tpot"))
    record.update(_stats_ms([g for gaps in itl_lists for g in gaps], "itl"))
    record.update(_stats_ms(_floats(ok["latency_s"]), "e2el"))
    record["repro"] = {
        "point_id": point.point_id,
        "conversation": [int(v) for v in ok["conversation"]],
        "turn": [int(v) for v in ok["turn"]],
        "think_s": [None if pd.isna(v) else float(v) for v in ok["think_s"]],
        "slo": objectives.text() if objectives else None,
    }
    return record


def to_vllm_bench(run: Run, objectives: Objectives | None) -> str:
    lines = [
        json.dumps(json_safe(vllm_bench_record(run, p, t, objectives)), allow_nan=False)
        for p, t in point_tables(run)
    ]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- guidellm

_GUIDELLM_PCT = {
    "p001": 0.1,
    "p01": 1,
    "p05": 5,
    "p10": 10,
    "p25": 25,
    "p50": 50,
    "p75": 75,
    "p90": 90,
    "p95": 95,
    "p99": 99,
    "p999": 99.9,
}


def distribution(values: Sequence[float]) -> dict[str, Any]:
    values = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not values:
        zero = dict.fromkeys(("mean", "median", "mode", "variance", "std_dev", "min", "max"), 0.0)
        return {
            **zero,
            "count": 0,
            "total_sum": 0.0,
            "percentiles": dict.fromkeys(_GUIDELLM_PCT, 0.0),
        }
    return {
        "mean": statistics.fmean(values),
        "median": statistics.median(values),
        "mode": statistics.mode(values),
        "variance": statistics.pvariance(values),
        "std_dev": statistics.pstdev(values),
        "min": min(values),
        "max": max(values),
        "count": len(values),
        "total_sum": float(sum(values)),
        "percentiles": {k: percentile(values, p) for k, p in _GUIDELLM_PCT.items()},
    }


def _status(table: pd.DataFrame, column: Any) -> dict[str, Any]:
    """A GuideLLM status distribution of ``column(frame) -> values``; nothing is incomplete."""
    ok, bad = _ok(table), table[~table["success"].astype(bool)]
    return {
        "successful": distribution(column(ok)),
        "errored": distribution(column(bad)),
        "incomplete": distribution([]),
        "total": distribution(column(table)),
    }


def _in_flight(table: pd.DataFrame) -> float:
    span = duration_s(table)
    done = table.dropna(subset=["end_s"])
    return float((done["end_s"] - done["start_s"]).sum() / span) if span else 0.0


def _request_stats(table: pd.DataFrame, point: PointRecord) -> list[dict[str, Any]]:
    out = []
    for row in table.itertuples(index=False):
        base = row.start_epoch - row.start_s if not pd.isna(row.start_epoch) else 0.0
        start = base + row.start_s
        out.append(
            {
                "request_id": f"{point.point_id}/c{row.conversation}/t{row.turn}",
                "request_type": "chat_completions",
                "prompt_tokens": None if pd.isna(row.prompt_tokens) else int(row.prompt_tokens),
                "output_tokens": None if pd.isna(row.output_tokens) else int(row.output_tokens),
                "start_time": start,
                "end_time": None if pd.isna(row.end_s) else base + row.end_s,
                "first_token_time": None if pd.isna(row.ttft_s) else start + row.ttft_s,
                "request_latency": None if pd.isna(row.latency_s) else row.latency_s,
                "time_to_first_token_ms": None if pd.isna(row.ttft_s) else row.ttft_s * 1000,
                "time_per_output_token_ms": None if pd.isna(row.tpot_s) else row.tpot_s * 1000,
                "inter_token_latency_ms": (
                    statistics.fmean(row.itl_s) * 1000 if len(row.itl_s) else None
                ),
            }
        )
    return out


def guidellm_benchmark(run: Run, point: PointRecord, table: pd.DataFrame) -> dict[str, Any]:
    span = duration_s(table) or 0.0

    def per_second(values: pd.Series) -> list[float]:
        return [float(values.fillna(0).sum()) / span] if span else []

    metrics = {
        "requests_per_second": _status(table, lambda f: [len(f) / span] if span else []),
        "request_concurrency": _status(table, lambda f: [_in_flight(table)]),
        "request_latency": _status(table, lambda f: _floats(f["latency_s"])),
        "prompt_token_count": _status(table, lambda f: _floats(f["prompt_tokens"])),
        "output_token_count": _status(table, lambda f: _floats(f["output_tokens"])),
        "time_to_first_token_ms": _status(
            table, lambda f: [v * 1000 for v in _floats(f["ttft_s"])]
        ),
        "time_per_output_token_ms": _status(
            table, lambda f: [v * 1000 for v in _floats(f["tpot_s"])]
        ),
        "inter_token_latency_ms": _status(
            table, lambda f: [g * 1000 for gaps in f["itl_s"] for g in gaps]
        ),
        "output_tokens_per_second": _status(table, lambda f: per_second(f["output_tokens"])),
        "tokens_per_second": _status(
            table, lambda f: per_second(f["output_tokens"].fillna(0) + f["prompt_tokens"].fillna(0))
        ),
    }
    stats = _request_stats(table, point)
    ok_mask = table["success"].astype(bool).tolist()
    return {
        "type_": "generative_benchmark",
        "id_": point.point_id,
        "run_id": run.name,
        "args": {"profile": {"type_": "concurrent", "streams": [point.parallel]}},
        "start_time": point.window[0],
        "end_time": point.window[1],
        "duration": span,
        "metrics": metrics,
        "requests": {
            "successful": [s for s, ok in zip(stats, ok_mask, strict=True) if ok],
            "errored": [s for s, ok in zip(stats, ok_mask, strict=True) if not ok],
            "incomplete": [],
        },
    }


def to_guidellm(run: Run) -> str:
    report = {"benchmarks": [guidellm_benchmark(run, p, t) for p, t in point_tables(run)]}
    return json.dumps(json_safe(report), indent=2, allow_nan=False) + "\n"


def export_run(run: Run, fmt: str, objectives: Objectives | None = None) -> str:
    if fmt == "csv":
        return to_csv(run)
    if fmt == "vllm-bench":
        return to_vllm_bench(run, objectives)
    if fmt == "guidellm":
        return to_guidellm(run)
    raise RunError(f"--format {fmt!r}: unknown (known: {', '.join(FORMATS)})")
