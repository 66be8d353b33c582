"""One EvalScope `perf` child process per sweep point, and the parsing of what it writes.

The argv is the blog's single command restricted to one (parallel, number) pair, with the
dataset offset that command would have used for that point (EvalScope advances
`--dataset-offset` by `number` after each point, docs/evalscope.md §4.2), `--no-test-connection`
(the harness sends its own warm-up outside the scrape window, docs/pitfalls.md), a fresh
`--outputs-dir` and `--no-timestamp`.  The child runs in its own process group so that a
timeout or Ctrl-C kills it and anything it spawned.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import env as harness_env
from harness.analysis.request_table import dataset_keys
from harness.client.request_records import RESULTS_DB, read_request_records
from harness.dataset.thinktime import ThinkTime
from harness.errors import ReproError, RunError
from harness.measurement import (
    ClientPercentiles,
    Measurement,
    Percentiles,
    RequestRecord,
    Sample,
    time_scaled_summary,
)
from harness.results import ClientSummary
from harness.serve.lifeline import guard_group

# (normalised field, spellings: evalscope 1.7 first, then >= 1.10)
_SUMMARY_KEYS: dict[str, tuple[str, ...]] = {
    "total_requests": ("Total Requests",),
    "success_requests": ("Success Requests", "Succeed Requests"),
    "failed_requests": ("Failed Requests",),
    "duration_s": ("Test Duration (s)", "Time taken for tests (s)"),
    "concurrency": ("Concurrency", "Number of concurrency"),
    "request_throughput": ("Req Throughput (req/s)", "Request throughput (req/s)"),
    "output_throughput": ("Output Throughput (tok/s)", "Output token throughput (tok/s)"),
    "total_throughput": ("Total Throughput (tok/s)", "Total token throughput (tok/s)"),
    "mean_latency_s": ("Avg Latency (s)", "Average latency (s)"),
    "mean_ttft_ms": ("TTFT (ms)", "Avg TTFT (ms)", "Average time to first token (s)"),
    "mean_tpot_ms": ("TPOT (ms)", "Avg TPOT (ms)"),
    "mean_itl_ms": ("ITL (ms)", "Avg ITL (ms)"),
    "avg_input_tokens": ("Avg Input Tokens", "Average input tokens per request"),
    "avg_output_tokens": ("Avg Output Tokens", "Average output tokens per request"),
    "kv_cache_hit_rate_pct": ("KV Cache Hit Rate (%)",),
    "decoded_tok_per_iter": ("Decoded Tok/Iter", "Avg Decoded Tok/Iter"),
}
_REQUIRED = ("total_requests", "success_requests", "failed_requests", "duration_s", "concurrency")

# benchmark_percentile.json: one row per percentile label, one column per quantity
_PERCENTILE_LABEL = "Percentiles"
_PERCENTILE_ROWS = {"p50": "50%", "p90": "90%", "p99": "99%"}
_PERCENTILE_COLUMNS = {
    "ttft_ms": "TTFT (ms)",
    "tpot_ms": "TPOT (ms)",
    "itl_ms": "ITL (ms)",
    "latency_s": "Latency (s)",
}
SUMMARY_FILE = "benchmark_summary.json"
PERCENTILE_FILE = "benchmark_percentile.json"
CLIENT_NAME = "EvalScope"  # how a point's reasons name this client

# Every name of EvalScope's files this module reads: no other module of harness/ spells one
# (tests/client/test_client_boundary.py).
EVALSCOPE_NAMES: frozenset[str] = frozenset(
    {key for keys in _SUMMARY_KEYS.values() for key in keys}
    | {_PERCENTILE_LABEL, *_PERCENTILE_ROWS.values(), *_PERCENTILE_COLUMNS.values()}
    | {SUMMARY_FILE, PERCENTILE_FILE, RESULTS_DB}
)


def evalscope_executable() -> Path:
    """The harness venv's own `evalscope` console script (pinned 1.7.0), next to the interpreter."""
    path = Path(sys.executable).parent / "evalscope"
    if not path.exists():
        raise RunError(
            f"{path}: evalscope console script not found next to {sys.executable}; "
            "install the harness with its dependencies (evalscope[perf]==1.7.0)"
        )
    return path


def client_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("evalscope")
    except PackageNotFoundError:
        return "unknown"


@dataclass(frozen=True)
class ClientArgs:
    model: str
    base_url: str  # without /v1
    dataset_path: Path
    max_tokens: int
    multi_turn: bool
    max_turns: int | None
    extra_args: dict[str, Any]  # the --extra-args body (ignore_eos first)
    think_time: ThinkTime | None = None  # a pause before turns > 1: the repro_think plugin
    time_scale: float = 1.0  # engine sim over HTTP: virtual time runs K x faster


def client_command(
    args: ClientArgs,
    *,
    parallel: int,
    number: int,
    dataset_offset: int,
    name: str,
    outputs_dir: Path,
    executable: Path | str = "evalscope",
) -> list[str]:
    cmd = [
        str(executable),
        "perf",
        "--model",
        args.model,
        "--url",
        f"{args.base_url}/v1/chat/completions",
        "--api",
        "openai",
        "--dataset",
        "swe_smith",
        "--dataset-path",
        str(args.dataset_path),
        "--dataset-offset",
        str(dataset_offset),
        "--max-tokens",
        str(args.max_tokens),
    ]
    if args.multi_turn:
        cmd.append("--multi-turn")
    if args.max_turns is not None:
        cmd += ["--max-turns", str(args.max_turns)]
    cmd += [
        "--number",
        str(number),
        "--parallel",
        str(parallel),
        "--extra-args",
        json.dumps(args.extra_args, separators=(",", ":")),
        "--name",
        name,
        "--outputs-dir",
        str(outputs_dir),
        "--no-timestamp",
        "--no-test-connection",
    ]
    if args.think_time is not None and args.think_time.active:
        return think_time_command(args, cmd[1:], outputs_dir)
    return cmd


THINK_LOG = "think_time.jsonl"  # in the point's --outputs-dir


def think_time_command(args: ClientArgs, perf_args: list[str], outputs_dir: Path) -> list[str]:
    """The same `perf` arguments, run through the think-time plugin (harness/client/thinktime.py):
    the one change to EvalScope's own argv is `--api repro_think`."""
    assert args.think_time is not None
    model = args.think_time
    if model.path is not None:  # the child may run elsewhere: an absolute file
        model = model.model_copy(update={"path": str(Path(model.path).expanduser().resolve())})
    perf_args = list(perf_args)
    perf_args[perf_args.index("--api") + 1] = "repro_think"
    return [
        sys.executable,
        "-m",
        "harness.client.thinktime",
        "--think",
        model.model_dump_json(),
        "--log",
        str(outputs_dir / THINK_LOG),
        "--dataset",
        str(args.dataset_path),
        "--time-scale",
        f"{args.time_scale:g}",
        "--",
        *perf_args,
    ]


def client_env() -> dict[str, str]:
    env = harness_env.for_child()
    loopback = "127.0.0.1,localhost,::1"
    for key in ("NO_PROXY", "no_proxy"):
        env[key] = f"{env[key]},{loopback}" if env.get(key) else loopback
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    return env


@dataclass
class ChildResult:
    exit_code: int | None
    started_at: float  # epoch
    ended_at: float
    started_mono: float
    ended_mono: float
    timed_out: bool = False
    interrupted: bool = False


def kill_group(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGINT, then SIGTERM, then SIGKILL to the child's whole process group."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


def run_child(
    cmd: list[str],
    *,
    log_path: Path,
    timeout_s: float,
    env: dict[str, str] | None = None,
    on_tick: Callable[[float], None] | None = None,
    tick_s: float = 1.0,
) -> ChildResult:
    """Run the client to completion or timeout; Ctrl-C kills the group and re-raises."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        started_at, started_mono = time.time(), time.monotonic()
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        guard = guard_group(proc.pid, grace_s=5.0)  # no orphan if the harness is SIGKILLed
        result = ChildResult(None, started_at, started_at, started_mono, started_mono)
        try:
            while True:
                try:
                    result.exit_code = proc.wait(timeout=tick_s)
                    break
                except subprocess.TimeoutExpired:
                    elapsed = time.monotonic() - started_mono
                    if elapsed > timeout_s:
                        result.timed_out = True
                        kill_group(proc)
                        result.exit_code = proc.returncode
                        break
                    if on_tick is not None:
                        on_tick(elapsed)
        except BaseException:
            result.interrupted = True
            kill_group(proc)
            raise
        finally:
            result.ended_at, result.ended_mono = time.time(), time.monotonic()
            guard.release()
    return result


# --------------------------------------------------------------------------- progress from the log

_TQDM = re.compile(r"Processing\[[^\]]*\][^\r\n]*?(\d+)/(\d+) \[")


def conversations_done(log_path: Path) -> tuple[int, int] | None:
    """(done, total) from the last tqdm 'Processing[...]' update in the client log."""
    try:
        with open(log_path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 8192))
            tail = handle.read().decode("utf-8", "replace")
    except OSError:
        return None
    found = _TQDM.findall(tail)
    return (int(found[-1][0]), int(found[-1][1])) if found else None


# --------------------------------------------------------------------------- outputs


def point_output_dir(outputs_dir: Path, name: str, parallel: int, number: int) -> Path:
    return outputs_dir / name / f"parallel_{parallel}_number_{number}"


def parse_summary(data: dict[str, Any]) -> ClientSummary:
    """Normalise benchmark_summary.json (both the 1.7 and the >= 1.10 key spellings)."""
    fields: dict[str, Any] = {}
    for field_name, keys in _SUMMARY_KEYS.items():
        for key in keys:
            if key in data and data[key] is not None:
                fields[field_name] = data[key]
                break
    missing = [f for f in _REQUIRED if f not in fields]
    if missing:
        raise RunError(
            f"benchmark_summary.json: missing {', '.join(missing)} "
            f"(keys present: {', '.join(sorted(data))})"
        )
    for key in ("total_requests", "success_requests", "failed_requests", "concurrency"):
        fields[key] = int(fields[key])
    sentinels = []
    for key in [k for k in fields if k not in _REQUIRED]:
        # EvalScope writes -1 (TPOT -1000 ms, ...) or NaN where it measured nothing
        value = fields[key]
        if isinstance(value, int | float) and (not math.isfinite(value) or value < 0):
            sentinels.append(f"{key}={value}")
            fields[key] = None
    return ClientSummary(**fields, raw=data, sentinels=sentinels)


def read_summary(point_dir: Path) -> ClientSummary:
    path = point_dir / SUMMARY_FILE
    try:
        return parse_summary(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise RunError(f"{path}: missing (EvalScope did not finish the point)") from None
    except json.JSONDecodeError as exc:
        raise RunError(f"{path}: not valid JSON ({exc})") from None
    except RunError as exc:
        raise RunError(f"{path}: {exc}") from None


def parse_percentiles(rows: Any) -> ClientPercentiles:
    """benchmark_percentile.json's rows as typed percentiles (a missing row or column: None;
    EvalScope's NaN, written where no request measured it, is kept as it wrote it)."""
    by_label = {str(row.get(_PERCENTILE_LABEL)): row for row in rows or () if isinstance(row, dict)}

    def column(name: str) -> Percentiles:
        values = []
        for label in _PERCENTILE_ROWS.values():
            value = by_label.get(label, {}).get(name)
            values.append(float(value) if isinstance(value, int | float) else None)
        return Percentiles(*values)

    return ClientPercentiles(**{key: column(name) for key, name in _PERCENTILE_COLUMNS.items()})


def read_percentiles(point_dir: Path) -> ClientPercentiles:
    path = point_dir / PERCENTILE_FILE
    if not path.exists():
        return ClientPercentiles()
    data = json.loads(path.read_text(encoding="utf-8"))
    return parse_percentiles(data if isinstance(data, list) else [])


def _query_results_db(point_dir: Path, sql: str) -> list[tuple]:
    """Rows of EvalScope's benchmark_data.db (read-only); [] when absent or unreadable."""
    path = point_dir / RESULTS_DB
    if not path.exists():
        return []
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    except sqlite3.Error:
        return []
    finally:
        con.close()


def read_request_bodies(point_dir: Path) -> list[dict[str, Any]]:
    """Request JSON bodies with their usage, in start order (for the fidelity check)."""
    rows = _query_results_db(
        point_dir,
        "SELECT request, prompt_tokens, completion_tokens, success FROM result ORDER BY start_time",
    )
    out = []
    for body, prompt, completion, ok in rows:
        try:
            request = json.loads(body) if body else {}
        except (TypeError, json.JSONDecodeError):
            request = {}
        out.append(
            {
                "request": request,
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "success": bool(ok),
            }
        )
    return out


def read_measurement(
    point_dir: Path,
    *,
    samples: list[Sample] | None = None,
    time_scale: float = 1.0,
    epoch_offset: float | None = None,
    dataset: Path | None = None,
    think_log: Path | None = None,
) -> Measurement:
    """One point's EvalScope outputs (``point_dir``: its `parallel_P_number_N` folder) as a
    :class:`Measurement`: the summary and percentiles x ``time_scale``, the per-request records
    from its sqlite (conversation matched to ``dataset``, pauses from the think-time log).
    A summary that cannot be read is a problem (the point is invalid); a sqlite that cannot be
    read leaves no per-request records and a note."""
    problems: list[str] = []
    notes: list[str] = []
    client = None
    try:
        client = read_summary(point_dir)
    except ReproError as exc:
        problems.append(str(exc))
    requests: list[RequestRecord] = []
    try:
        requests = read_request_records(point_dir, keys=dataset_keys(dataset), think_log=think_log)
    except ReproError as exc:
        notes.append(str(exc))
    return Measurement(
        client_name=CLIENT_NAME,
        requests=tuple(requests),
        samples=tuple(samples or ()),
        client=time_scaled_summary(client, time_scale),
        percentiles=read_percentiles(point_dir).time_scaled(time_scale),
        time_scale=time_scale,
        epoch_offset=epoch_offset,
        problems=tuple(problems),
        notes=tuple(notes),
    )
