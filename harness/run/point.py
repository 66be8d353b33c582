"""One sweep point against a live server: warm up, scrape, run the client, judge, record.

The record is returned, not written: the sweep writes `point.json` last, so its presence means
"finished".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import requests

from harness import metric_names as mn
from harness.analysis.fidelity import check_fidelity
from harness.analysis.metrics import derive_point_metrics
from harness.analysis.point_table import keep_evalscope_table
from harness.client.evalscope import (
    THINK_LOG,
    ChildResult,
    ClientArgs,
    client_env,
    conversations_done,
    evalscope_executable,
    point_output_dir,
    read_percentiles,
    read_request_bodies,
    read_requests,
    read_summary,
    run_child,
)
from harness.client.plan import PlannedPoint
from harness.client.scrape import Sample, Scraper, write_samples_csv
from harness.engines import Server
from harness.errors import ReproError
from harness.results import ClientSummary, PointRecord, RunLayout, atomic_write_json
from harness.run.console import Progress
from harness.serve.profiles import SweepSpec


def rescale_client(client: ClientSummary | None, k: float) -> ClientSummary | None:
    """Client-side times x K, rates / K: the simulated server ran K x faster than real time."""
    if client is None or k == 1.0:
        return client
    data = client.model_dump()
    for key in ("duration_s", "mean_latency_s", "mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms"):
        if data.get(key) is not None:
            data[key] *= k
    for key in ("request_throughput", "output_throughput", "total_throughput"):
        if data.get(key) is not None:
            data[key] /= k
    data["raw"] = {**data.get("raw", {}), "repro_time_scale": k}
    return ClientSummary.model_validate(data)


def rescale_percentiles(rows: list[dict[str, Any]] | None, k: float) -> list[dict[str, Any]]:
    """Percentile rows with times x K and per-request rates / K."""
    if not rows or k == 1.0:
        return list(rows or [])
    times = ("Latency (s)", "TTFT (ms)", "ITL (ms)", "TPOT (ms)")
    rates = ("Output (tok/s)", "Total (tok/s)", "Decode (tok/s)")
    out = []
    for row in rows:
        new = dict(row)
        for key in times + rates:
            if isinstance(new.get(key), int | float):
                new[key] = new[key] * k if key in times else new[key] / k
        out.append(new)
    return out


def warm_up(
    base_url: str,
    model: str,
    *,
    count: int,
    max_tokens: int,
    extra: dict[str, Any],
    timeout_s: float,
) -> list[str]:
    """Warm-up completions outside the scrape window; returns error strings (empty = fine)."""
    errors: list[str] = []
    session = requests.Session()
    session.trust_env = False
    for i in range(count):
        body = {
            "model": model,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "stream": False,
            "messages": [{"role": "user", "content": f"repro warm-up request {i}"}],
            **extra,
        }
        try:
            response = session.post(f"{base_url}/v1/chat/completions", json=body, timeout=timeout_s)
            if response.status_code != 200:
                errors.append(f"warm-up {i}: HTTP {response.status_code}")
        except requests.RequestException as exc:
            errors.append(f"warm-up {i}: {type(exc).__name__}")
    return errors


def alive(server: Server) -> bool:
    try:
        return bool(server.alive())
    except Exception:  # noqa: BLE001 - a server that cannot answer is not alive
        return False


@dataclass
class Measurement:
    """What one client run produced, before judging."""

    command: list[str]
    child: ChildResult
    samples: list[Sample]
    scrapes_ok: int
    gaps: int
    notes: list[str]


def measure(
    plan: PlannedPoint,
    *,
    layout: RunLayout,
    server: Server,
    args: ClientArgs,
    spec: SweepSpec,
    progress: Progress,
    time_scale: float = 1.0,
) -> Measurement:
    """Warm up, then run the client with the scraper polling; samples.csv is written here."""
    pdir = layout.point_dir(plan.point_id)
    pdir.mkdir(parents=True, exist_ok=True)
    cmd = plan.client_command(
        args, outputs_dir=layout.evalscope_dir(plan.point_id), executable=evalscope_executable()
    )
    notes = warm_up(
        server.base_url,
        args.model,
        count=spec.warmup_requests,
        max_tokens=args.max_tokens,
        extra=args.extra_args,
        timeout_s=min(spec.point_timeout_s, 600.0),
    )
    # The scrape period is virtual time too: K x faster keeps the samples per point.
    scraper = Scraper(f"{server.base_url}/metrics", spec.scrape_interval_s / time_scale)
    scraper.scrape_now()  # start sample: after the warm-up, before the first request
    scraper.start()
    log_path = pdir / "client.log"

    def tick(elapsed: float) -> None:
        progress.update(plan.label, elapsed, conversations_done(log_path), scraper.last_running)

    try:
        child = run_child(
            cmd, log_path=log_path, timeout_s=spec.point_timeout_s, env=client_env(), on_tick=tick
        )
    finally:
        scraper.stop()
        progress.done()
    scraper.scrape_now()  # end sample
    samples, gaps = scraper.snapshot()
    write_samples_csv(layout.samples_csv(plan.point_id), samples)
    if gaps:
        atomic_write_json(pdir / "scrape_gaps.json", [g.__dict__ for g in gaps])
    return Measurement(cmd, child, samples, scraper.scrapes_ok, len(gaps), notes)


def client_reasons(
    client: ClientSummary | None, *, number: int, turns: int, sentinels: list[str]
) -> list[str]:
    """Why the client's own summary makes a point invalid (empty: it does not)."""
    if client is None:
        return []
    reasons: list[str] = []
    expected = number * turns
    if client.failed_requests:
        reasons.append(f"EvalScope reported {client.failed_requests} failed requests")
    if client.total_requests != expected:
        reasons.append(
            f"total requests {client.total_requests} != "
            f"{number} conversations x {turns} turns = {expected}"
        )
    elif client.success_requests != expected:
        reasons.append(f"success requests {client.success_requests} != {expected}")
    if sentinels:
        reasons.append(
            "EvalScope reported no measurement for " + ", ".join(sentinels) + " (stored as null)"
        )
    return reasons


def _window(m: Measurement, timings: list[Any]) -> tuple[tuple[float, float], float | None]:
    """The exact request window on the epoch clock (via the monotonic offset at child start)."""
    child = m.child
    offset = child.started_at - child.started_mono
    ends = [t.end for t in timings if t.end is not None]
    if timings and ends:
        window = (min(t.start for t in timings) + offset, max(ends) + offset)
    else:
        window = (child.started_at, child.ended_at)
    busy = window[1] - window[0] if timings else None
    return window, busy


def run_point(
    plan: PlannedPoint,
    *,
    layout: RunLayout,
    server: Server,
    args: ClientArgs,
    turns: int,
    spec: SweepSpec,
    gpus: int,
    progress: Progress,
    expected_turn_tokens: int | None = None,
    time_scale: float = 1.0,
) -> PointRecord:
    """Run one point against a live server and return its (not yet written) record.

    `time_scale` K (engine sim): the server's clock ran K x faster, so the client's times are
    multiplied by K (rates divided) before any metric is derived."""
    m = measure(
        plan,
        layout=layout,
        server=server,
        args=args,
        spec=spec,
        progress=progress,
        time_scale=time_scale,
    )
    child, notes, reasons = m.child, list(m.notes), []
    if child.timed_out:
        reasons.append(f"client timed out after {spec.point_timeout_s:.0f}s (process group killed)")
    elif child.exit_code != 0:
        reasons.append(f"client exited with code {child.exit_code}")
    if not alive(server):
        reasons.append("server died during the point")

    ev_dir = point_output_dir(
        layout.evalscope_dir(plan.point_id), plan.point_id, plan.parallel, plan.number
    )
    client = None
    try:
        client = read_summary(ev_dir)
    except ReproError as exc:
        reasons.append(str(exc))
    client = rescale_client(client, time_scale)
    if time_scale != 1.0:
        notes.append(
            f"simulated engine at time scale {time_scale:g}: client times x {time_scale:g}"
        )
    sentinels = list(client.sentinels) if client is not None else []
    reasons += client_reasons(client, number=plan.number, turns=turns, sentinels=sentinels)
    timings = read_requests(ev_dir)
    derived = derive_point_metrics(
        m.samples,
        client=client,
        percentiles=rescale_percentiles(read_percentiles(ev_dir), time_scale),
        requests=timings,
        parallel=plan.parallel,
        gpus=gpus,
    )
    derived.metrics = keep_evalscope_table(
        layout.point_dir(plan.point_id),
        ev_dir,
        derived.metrics,
        notes=notes,
        dataset=args.dataset_path,
        think_log=layout.evalscope_dir(plan.point_id) / THINK_LOG,
        slo=spec.slo,
        time_scale=time_scale,
        epoch_offset=child.started_at - child.started_mono,
    )
    if derived.counter_resets:
        reasons.append(
            f"server counters reset {derived.counter_resets}x in the window (server restarted)"
        )
    if derived.metrics.get("occupancy") is None:
        notes.append(f"no non-zero {mn.NUM_REQUESTS_RUNNING} sample: occupancy is null")
    window, busy = _window(m, timings)
    fidelity = check_fidelity(
        read_request_bodies(ev_dir), expected_turn_tokens=expected_turn_tokens
    )
    fidelity.update(derived.info)
    notes += fidelity.get("warnings", [])
    return PointRecord(
        **plan.identity(turns),
        started_at=child.started_at,
        ended_at=child.ended_at,
        window=window,
        valid=not reasons,
        invalid_reasons=reasons,
        client=client,
        metrics=derived.metrics,
        samples=m.scrapes_ok,
        scrape_gaps=m.gaps,
        client_command=m.command,
        client_exit_code=child.exit_code,
        overhead_s=(child.ended_at - child.started_at - busy) if busy is not None else None,
        server_restarts=derived.counter_resets,
        fidelity=fidelity,
        notes=notes,
    )
