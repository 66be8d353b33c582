"""`repro simulate`: a run directory in the same schema as a real sweep, from the simulator.

Points are planned by `harness.client.plan.plan_points` (the blog's offsets and rotation). Each
point's simulated client records and samples become a `harness.measurement.Measurement`, judged
by `harness.analysis.validity` and derived by `harness.analysis.metrics` as a served point's are,
and written with `harness.results`' records. Times are virtual seconds from the engine's start.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import __version__
from harness import env as harness_env
from harness.analysis.metrics import derive_point_metrics
from harness.analysis.point_table import request_frame, with_table_metrics
from harness.analysis.validity import invalid_reasons
from harness.client.plan import plan_points
from harness.client.scrape import write_samples_csv
from harness.config import read_json, read_yaml, require_mapping
from harness.dataset.thinktime import PauseTable
from harness.engine_spec import EngineSpec
from harness.errors import ConfigError, RunError
from harness.identity import configuration_key
from harness.measurement import ClientPercentiles, Measurement, Percentiles, RequestRecord
from harness.names import check_name
from harness.paths import DATASETS_DIR, results_dir
from harness.results import (
    ClientSummary,
    PointRecord,
    RunLayout,
    RunManifest,
    atomic_write_json,
    write_summary,
)
from harness.serve.run_config import build_run_config
from harness.sim.client import PointClient, Turn, Workload, shaped_workload
from harness.sim.config import (
    SimSetup,
    calibration_label,
    resolve_calibration,
    setup_from_profile,
    split_overrides,
)
from harness.sim.startup import EngineRefused
from harness.sim.tables import PointOutput, write_point_table
from harness.text import modified_text

BLOG_SHAPE = {
    "number": 128,
    "num_turns": 13,
    "first_turn_length": 74160,
    "subsequent_turn_length": 753,
}


SIM_ENGINE = EngineSpec(kind="sim", simulated=True)  # harness.engines.sim


@dataclass
class SimPoint:
    record: PointRecord
    steps: int


def load_workload(spec: str | None) -> Workload:
    """No spec: the blog shape (docs/recipe.md §6.8). A recipe name/YAML or a built JSON's
    metadata."""
    if spec is None:
        return shaped_workload(**_shape(BLOG_SHAPE, "blog-shaped"), source="blog-shaped")
    path = Path(spec).expanduser()
    if path.suffix == ".json" and path.is_file():
        data = require_mapping(read_json(path, "dataset"), path, "built dataset")
        meta = data.get("metadata") or {}
        convs = data.get("conversations") or []
        shape = {**meta, "number": len(convs), "num_turns": len(convs[0]) if convs else 0}
        return shaped_workload(**_shape(shape, str(path)), source=str(path))
    recipe = path if path.suffix in (".yaml", ".yml") else DATASETS_DIR / f"{spec}.yaml"
    if not recipe.is_file():
        raise ConfigError(f"--dataset {spec!r}: no recipe {recipe} and no built JSON")
    data = require_mapping(read_yaml(recipe, "dataset recipe") or {}, recipe, "dataset recipe")
    return shaped_workload(**_shape(data, str(recipe)), source=str(recipe))


def _shape(data: dict[str, Any], where: str) -> dict[str, int]:
    out = {}
    keys = {
        "number": "number",
        "num_turns": "num_turns",
        "first_turn_length": "first",
        "subsequent_turn_length": "subsequent",
    }
    for key, arg in keys.items():
        value = data.get(key)
        if not isinstance(value, int) or value < 1:
            raise ConfigError(
                f"{where}: {key}: {value!r}: the simulator needs per-turn token "
                "counts (a positive integer)"
            )
        out[arg] = value
    return out


def _span(r: Turn) -> float:
    """Latency of a finished request (callers keep only requests with an end)."""
    assert r.end is not None
    return r.end - r.start


def client_summary(records: list[Turn], *, parallel: int, start: float) -> ClientSummary:
    ok = [r for r in records if r.success and r.end is not None]
    end = max((r.end for r in records if r.end is not None), default=start)
    duration = max(end - start, 1e-9)
    prompt = sum(r.prompt for r in ok)
    out = sum(r.out for r in ok)
    tpots = [(_span(r) - r.ttft) / (r.out - 1) for r in ok if r.out > 1 and r.ttft is not None]
    itls = [
        (_span(r) - r.ttft) / r.decode_steps for r in ok if r.decode_steps and r.ttft is not None
    ]
    return ClientSummary(
        total_requests=len(records),
        success_requests=len(ok),
        failed_requests=len(records) - len(ok),
        duration_s=duration,
        concurrency=parallel,
        request_throughput=len(ok) / duration,
        output_throughput=out / duration,
        total_throughput=(prompt + out) / duration,
        mean_latency_s=mean([_span(r) for r in ok]),
        mean_ttft_ms=_ms(mean([r.ttft for r in ok if r.ttft is not None])),
        mean_tpot_ms=_ms(mean(tpots)),
        mean_itl_ms=_ms(mean(itls)),
        avg_input_tokens=prompt / len(ok) if ok else None,
        avg_output_tokens=out / len(ok) if ok else None,
        kv_cache_hit_rate_pct=100.0 * sum(r.client_cached for r in ok) / prompt if prompt else None,
        decoded_tok_per_iter=out / sum(r.decode_steps + 1 for r in ok) if ok else None,
        raw={"simulated": True},
    )


def mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000.0


def _percentiles(values: list[float], scale: float = 1.0) -> Percentiles:
    """p50/p90/p99 (nearest rank below, as EvalScope's percentile table) x ``scale``."""
    if not values:
        return Percentiles()
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * scale

    return Percentiles(at(0.5), at(0.9), at(0.99))


ABANDONED = "prompt + max_tokens > max-model-len: conversation abandoned"


def request_records(records: list[Turn]) -> tuple[RequestRecord, ...]:
    """The simulated client's turns as the project's per-request records; a turn's
    inter-token gaps are its decode time spread over its decode steps."""
    out = []
    for r in records:
        decode = (r.end - r.start - r.ttft) if r.end is not None and r.ttft is not None else 0.0
        steps = r.decode_steps if r.success else 0
        out.append(
            RequestRecord(
                start=r.start,
                end=r.end,
                success=r.success,
                prompt_tokens=r.prompt,
                output_tokens=r.out,
                conversation=r.conv,
                turn=r.turn,
                ttft=r.ttft,
                itl=(decode / steps,) * steps if steps else (),
                think=r.think,
                server_cached=r.server_cached,
                error=None if r.success else ABANDONED,
            )
        )
    return tuple(out)


def measurement(client: PointClient, res: Any, *, parallel: int) -> Measurement:
    """One simulated point as a Measurement: the client's summary and percentiles, its
    per-request records and the engine's samples (virtual seconds, time scale 1)."""
    requests = request_records(client.records)
    ok = [q for q in requests if q.success]
    return Measurement(
        client_name="the simulated client",
        requests=requests,
        samples=tuple(res.samples),
        client=client_summary(client.records, parallel=parallel, start=res.start),
        percentiles=ClientPercentiles(
            ttft_ms=_percentiles([t for q in ok if (t := q.ttft) is not None], 1000.0),
            tpot_ms=_percentiles([t for q in ok if (t := q.tpot) is not None], 1000.0),
            itl_ms=_percentiles([g for q in ok for g in q.itl], 1000.0),
            latency_s=_percentiles([t for q in ok if (t := q.latency) is not None]),
        ),
    )


def simulate_points(
    setup: SimSetup,
    workload: Workload,
    sweep: Any,
    only: Sequence[str] | None = None,
    gpus: int = 1,
) -> list[tuple[PointRecord, list[Any]]]:
    """Run every planned point on one engine (one server lifetime); records + samples."""
    engine = setup.build()
    turns = min(workload.num_turns, sweep.max_turns or workload.num_turns)
    planned = plan_points(
        [tuple(p) for p in sweep.points],
        dataset_offset=sweep.dataset_offset,
        num_conversations=workload.num_conversations,
        only=only,
    )
    out: list[tuple[PointRecord, list[Any]]] = []
    for plan in planned:
        client = PointClient(
            workload,
            plan.conversations,
            plan.parallel,
            turns,
            sweep.max_tokens,
            setup.max_model_len,
            pauses=PauseTable(sweep.think_time) if sweep.think_time.active else None,
        )
        stalled = engine.submit_stall_s
        res = engine.run_point(client, sweep.scrape_interval_s)
        measured = measurement(client, res, parallel=plan.parallel)
        record = _record(plan, measured, res, turns, gpus)
        # GPU time lost to the connector's copy submissions (Engine.step_duration)
        record.fidelity["copy_submit_stall_s"] = round(engine.submit_stall_s - stalled, 6)
        interval = setup.interval80(record.metrics)
        if interval:  # the calibration's 80 % prediction interval (harness.sim.calibrate)
            record.fidelity["interval80"] = interval
        item = PointOutput((record, res.samples))
        frame = request_frame(measured)
        if frame is not None:
            record.metrics = with_table_metrics(
                record.metrics, frame, slo=getattr(sweep, "slo", None)
            )
            item.table = frame
        out.append(item)
        engine.now += sweep.sleep_between_points_s
    return out


def _record(plan: Any, measured: Measurement, res: Any, turns: int, gpus: int) -> PointRecord:
    derived = derive_point_metrics(measured, parallel=plan.parallel, gpus=gpus)
    reasons = invalid_reasons(measured, conversations=plan.number, turns=turns)
    window = measured.window or (res.start, res.end)
    return PointRecord(
        **plan.identity(turns),
        started_at=res.start,
        ended_at=res.end,
        window=window,
        valid=not reasons,
        invalid_reasons=reasons,
        client=measured.client,
        metrics=derived.metrics,
        samples=derived.scrapes,
        scrape_gaps=0,
        client_command=[],
        client_exit_code=0,
        overhead_s=0.0,
        server_restarts=0,
        fidelity={**derived.info, "engine_steps": res.steps},
        notes=["simulated (virtual clock)"],
    )


def run_simulation(
    profile_name: str,
    *,
    dataset: str | None = None,
    calibration: Path | None = None,
    overrides: Sequence[str] = (),
    points: Sequence[str] | None = None,
    out: Path | None = None,
    run_id: str | None = None,
) -> Path:
    """Simulate a profile's sweep and write its run directory; returns the directory."""
    from harness.serve.profiles import load_profile

    serve_sets, params = split_overrides(overrides)
    prof = load_profile(profile_name, serve_sets)
    cal = resolve_calibration(calibration, prof.model)
    dataset = dataset or profile_dataset(prof)
    workload = load_workload(dataset)
    rid = run_id or f"sim-{prof.name}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    check_name(rid, "run id")  # an API caller's run_id is checked as the CLI's --run-id is
    run_dir = Path(out or results_dir()) / rid
    if run_dir.exists():
        raise RunError(
            f"{run_dir}: already exists; a simulation never writes into an existing run directory"
        )
    gpus = max(int(prof.gpus), 1)
    profile_dump = prof.model_dump(mode="json")
    sweep_dump = prof.sweep.model_dump(mode="json")
    digest = hashlib.sha256(repr(workload.turns).encode()).hexdigest()
    cal_info = _calibration_info(cal, params)
    fields: dict[str, Any] = {
        "profile_name": prof.name,
        "profile": profile_dump,
        "overrides": list(overrides),
        "gpus": gpus,
        "dataset": {
            "spec": dataset or "blog-shaped",
            "path": workload.source,
            "sha256": digest,
            "num_conversations": workload.num_conversations,
            "num_turns": workload.num_turns,
            "manifest": {"token_counts_only": True},
        },
        "configuration_key": configuration_key(
            dataset_sha256=digest, sweep=sweep_dump, profile=profile_dump
        ),
        "sweep": sweep_dump,
        "run_config": build_run_config(
            engine=SIM_ENGINE,
            profile=prof,
            overrides=list(overrides),
            dataset=dataset or "blog-shaped",
            only_points=list(points) if points else None,
            environment=harness_env.snapshot(),
        ).model_dump(mode="json"),
    }
    try:
        setup = setup_from_profile(prof, cal, params)
    except EngineRefused as exc:
        _write_refused(run_dir, rid, fields, exc, cal_info)
        raise EngineRefused(exc.reason, f"{exc.where} (recorded in {run_dir})") from None
    results = simulate_points(setup, workload, prof.sweep, points, gpus)
    layout = RunLayout(run_dir)
    run_dir.mkdir(parents=True)
    manifest = simulated_manifest(
        rid,
        **fields,
        planned_points=[r.point_id for r, _ in results],
        build={
            "engine": "sim",
            "calibration": cal_info,
            "setup": setup.facts,
            "params": setup.roofline.fitted(),
        },
        notes=["simulated run: times are virtual seconds", f"calibration: {cal_info['label']}"],
    )
    write_simulated_run(layout, manifest, results)
    return run_dir


def profile_dataset(prof: Any) -> str | None:
    """The profile's own sweep dataset when it names one (token counts only), else None."""
    return prof.sweep.dataset if "dataset" in prof.sweep.model_fields_set else None


def _write_refused(
    run_dir: Path, rid: str, fields: dict[str, Any], exc: EngineRefused, cal_info: dict[str, Any]
) -> None:
    """A refused start is a run too (status failed, no points), so claims can judge it."""
    run_dir.mkdir(parents=True)
    manifest = simulated_manifest(
        rid,
        **fields,
        build={"engine": "sim", "calibration": cal_info},
        start_failure={"stage": "startup", "exit_code": exc.exit_code, "reason": exc.reason},
        notes=["simulated run: the engine refused to start", f"refused: {exc.reason}"],
    )
    manifest.status = "failed"
    atomic_write_json(RunLayout(run_dir).manifest, manifest)


def simulated_manifest(run_id: str, **fields: Any) -> RunManifest:
    """The manifest of a finished simulated run (engine sim, the simulator's own client)."""
    now = time.time()
    return RunManifest(
        run_id=run_id,
        status="complete",
        created_at=now,
        finished_at=now,
        harness_version=__version__,
        engine="sim",
        engine_spec=SIM_ENGINE,
        base_url="sim://",
        client={"name": "sim-client", "version": __version__, "semantics": "evalscope multi-turn"},
        **fields,
    )


def write_simulated_run(
    layout: RunLayout, manifest: RunManifest, results: list[tuple[PointRecord, list[Any]]]
) -> None:
    """The manifest as `partial`, then each point's samples and record, then the summary, and
    only then the final manifest (an atomic rename): a writer stopped anywhere (Ctrl-C, a full
    disk, a kill) leaves a run that says `partial`, never `complete` with points missing
    (issue 26: `runs list`, `history accept` and `--resume` trust the status)."""
    interim = manifest.model_copy(
        update={
            "status": "partial",
            "finished_at": None,
            "notes": [*manifest.notes, "the writer stopped before every point was written"],
        }
    )
    atomic_write_json(layout.manifest, interim)
    for item in results:
        record, samples = item
        write_point_table(layout.point_dir(record.point_id), item)
        write_samples_csv(layout.samples_csv(record.point_id), samples)
        atomic_write_json(layout.point_json(record.point_id), record)
    write_summary(layout, manifest.run_id, [r for r, _ in results])
    atomic_write_json(layout.manifest, manifest)  # last: the status is now true


def _calibration_info(cal: Any, moved: dict[str, float]) -> dict[str, Any]:
    """The calibration as the manifest records it; `modified`: the parameters a
    `--set sim.NAME=VALUE` moved off it (the run then carries no interval)."""
    if cal is None:
        return {"path": None, "label": calibration_label(None), "note": "roofline defaults"}
    return {
        "label": calibration_label(cal) + modified_text(moved),
        "path": str(cal.path),
        "sha256": hashlib.sha256(cal.path.read_bytes()).hexdigest(),
        "model": cal.model,
        "gpu": cal.gpu,
        "params": cal.params,
        "modified": dict(moved),
    }
