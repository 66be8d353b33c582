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
from harness.analysis.point_table import keep_measurement_table
from harness.analysis.validity import invalid_reasons
from harness.client.evalscope import (
    THINK_LOG,
    ChildResult,
    ClientArgs,
    client_env,
    conversations_done,
    evalscope_executable,
    point_output_dir,
    read_measurement,
    read_request_bodies,
    run_child,
)
from harness.client.plan import PlannedPoint
from harness.client.scrape import Sample, Scraper, write_samples_csv
from harness.engines import Engine, Server
from harness.measurement import Measurement
from harness.results import PointRecord, RunLayout, atomic_write_json
from harness.run.console import Progress
from harness.serve.profiles import SweepSpec


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
class ClientRun:
    """What one client process did, before its outputs are read."""

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
) -> ClientRun:
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
    scraper = Scraper(server.metrics_url, spec.scrape_interval_s / time_scale)
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
    return ClientRun(cmd, child, samples, scraper.scrapes_ok, len(gaps), notes)


def _window(run: ClientRun, measured: Measurement) -> tuple[tuple[float, float], float | None]:
    """The exact request window on the epoch clock (via the monotonic offset at child start)."""
    child = run.child
    span = measured.window
    if span is None:
        window = (child.started_at, child.ended_at)
    else:
        offset = child.started_at - child.started_mono
        window = (span[0] + offset, span[1] + offset)
    busy = window[1] - window[0] if measured.requests else None
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
    engine: Engine | None = None,
) -> PointRecord:
    """Run one point against a live server and return its (not yet written) record.

    `time_scale` K (engine sim): the server's clock ran K x faster, so the client's times are
    multiplied by K (rates divided) before any metric is derived."""
    run = measure(
        plan,
        layout=layout,
        server=server,
        args=args,
        spec=spec,
        progress=progress,
        time_scale=time_scale,
    )
    child, notes, reasons = run.child, list(run.notes), []
    if child.timed_out:
        reasons.append(f"client timed out after {spec.point_timeout_s:.0f}s (process group killed)")
    elif child.exit_code != 0:
        reasons.append(f"client exited with code {child.exit_code}")
    if not alive(server):
        reasons.append("server died during the point")

    ev_dir = point_output_dir(
        layout.evalscope_dir(plan.point_id), plan.point_id, plan.parallel, plan.number
    )
    measured = read_measurement(
        ev_dir,
        samples=run.samples,
        time_scale=time_scale,
        epoch_offset=child.started_at - child.started_mono,
        dataset=args.dataset_path,
        think_log=layout.evalscope_dir(plan.point_id) / THINK_LOG,
    )
    if time_scale != 1.0:
        notes.append(
            f"simulated engine at time scale {time_scale:g}: client times x {time_scale:g}"
        )
    notes += measured.notes
    reasons += invalid_reasons(measured, conversations=plan.number, turns=turns)
    derived = derive_point_metrics(measured, parallel=plan.parallel, gpus=gpus)
    derived.metrics = keep_measurement_table(
        layout.point_dir(plan.point_id), measured, derived.metrics, slo=spec.slo
    )
    if derived.counter_resets:
        reasons.append(
            f"server counters reset {derived.counter_resets}x in the window (server restarted)"
        )
    if derived.metrics.get("occupancy") is None:
        notes.append(f"no non-zero {mn.NUM_REQUESTS_RUNNING} sample: occupancy is null")
    window, busy = _window(run, measured)
    fidelity = check_fidelity(
        read_request_bodies(ev_dir), expected_turn_tokens=expected_turn_tokens
    )
    fidelity.update(derived.info)
    if engine is not None and (interval := engine.interval80(server, derived.metrics)):
        fidelity["interval80"] = interval  # e.g. the simulator's calibration, as `repro simulate`
    notes += fidelity.get("warnings", [])
    return PointRecord(
        **plan.identity(turns),
        started_at=child.started_at,
        ended_at=child.ended_at,
        window=window,
        valid=not reasons,
        invalid_reasons=reasons,
        client=measured.client,
        metrics=derived.metrics,
        samples=run.scrapes_ok,
        scrape_gaps=run.gaps,
        client_command=run.command,
        client_exit_code=child.exit_code,
        overhead_s=(child.ended_at - child.started_at - busy) if busy is not None else None,
        server_restarts=derived.counter_resets,
        fidelity=fidelity,
        notes=notes,
    )
