"""Typed, versioned result records and the on-disk layout of a run.

Every stage talks through these records, never through another stage's internals.
The file system is the database:

    results/<run-id>/
        manifest.json          RunManifest (what was run, with what, where, when)
        server.log             the vLLM server's output (engine=vllm only)
        summary.json           RunSummary (one row per point, written after every point)
        summary.csv            the same rows, flat
        points/<point-id>/
            point.json         PointRecord (written last: its presence means "finished")
            samples.csv        scraped /metrics samples: timestamp,monotonic,name,labels,value
            evalscope/         EvalScope's own outputs for this point
            client.log         EvalScope's stdout/stderr

Records are written atomically (temp file + rename), so a crash never leaves half a file.
Readers accept the current schema version and reject others with a message naming the file.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness import metric_names as mn
from harness.config import read_json, validate
from harness.engine_spec import CONFIG_KEY_NAMES, RUN_1, RUN_1_AS_2, EngineSpec, legacy_engine_spec
from harness.errors import RunError
from harness.paths import check_not_run_record, check_writable  # noqa: F401 - lived here first
from harness.text import modified_text, rows_to_csv

RUN_SCHEMA: Final = "repro.run/2"
POINT_SCHEMA: Final = "repro.point/1"
SUMMARY_SCHEMA: Final = "repro.summary/2"  # /2: the calibration of a simulated run
UNCALIBRATED: Final = "uncalibrated"  # a simulated run on the roofline defaults


# --------------------------------------------------------------------------- metric catalogue


@dataclass(frozen=True)
class MetricSpec:
    """How to show and judge one derived per-point metric."""

    label: str
    unit: str
    better: Literal["higher", "lower"] | None  # None: informational, no direction
    description: str


METRICS: dict[str, MetricSpec] = {
    "occupancy": MetricSpec(
        "Mean requests running",
        "requests",
        "higher",
        f"Mean of the non-zero {mn.NUM_REQUESTS_RUNNING} samples, summed over engines (blog).",
    ),
    "engine_occupancy": MetricSpec(
        "Mean requests in the engine",
        "requests",
        "higher",
        f"Delta of {mn.hist_sum(mn.REQUEST_INFERENCE_TIME_SECONDS)} over the point / the span"
        " of its requests: the engine's own time, not a sampled gauge.",
    ),
    "interactivity": MetricSpec(
        "Interactivity",
        "tok/s/user",
        "higher",
        "1000 / EvalScope mean TPOT (ms) (blog).",
    ),
    "throughput_per_gpu": MetricSpec(
        "Total-token throughput per GPU",
        "tok/s/GPU",
        "higher",
        "EvalScope Total Throughput / GPUs; includes prefix-cached prompt tokens (blog).",
    ),
    "output_throughput_per_gpu": MetricSpec(
        "Output throughput per GPU",
        "tok/s/GPU",
        "higher",
        "EvalScope Output Throughput / GPUs (vllm bench sweep's y axis).",
    ),
    "output_tps_per_user": MetricSpec(
        "Output tok/s per user",
        "tok/s/user",
        "higher",
        "EvalScope Output Throughput / configured concurrency (vllm bench sweep's x axis).",
    ),
    "request_throughput": MetricSpec("Request throughput", "req/s", "higher", "EvalScope."),
    "mean_tpot_ms": MetricSpec("Mean TPOT", "ms", "lower", "EvalScope mean TPOT."),
    "mean_ttft_ms": MetricSpec("Mean TTFT", "ms", "lower", "EvalScope mean TTFT."),
    "p99_ttft_ms": MetricSpec("P99 TTFT", "ms", "lower", "EvalScope 99th percentile TTFT."),
    "p99_tpot_ms": MetricSpec("P99 TPOT", "ms", "lower", "EvalScope 99th percentile TPOT."),
    "mean_itl_ms": MetricSpec("Mean ITL", "ms", "lower", "EvalScope mean ITL."),
    "server_tpot_ms": MetricSpec(
        "Server mean TPOT",
        "ms",
        "lower",
        f"Delta of {mn.REQUEST_TIME_PER_OUTPUT_TOKEN_SECONDS} sum/count over the point.",
    ),
    "mtp_acceptance_length": MetricSpec(
        "MTP acceptance length",
        "tokens/step",
        "higher",
        "1 + delta accepted tokens / delta drafts (server counters); null without spec decode.",
    ),
    "spec_acceptance_rate": MetricSpec(
        "Draft acceptance rate",
        "fraction",
        "higher",
        "delta accepted / delta draft tokens.",
    ),
    "preemptions": MetricSpec(
        "Preemptions",
        "count",
        "lower",
        f"Delta of {mn.total(mn.NUM_PREEMPTIONS)} over the point.",
    ),
    "waiting_mean": MetricSpec(
        "Mean requests waiting",
        "requests",
        "lower",
        f"Mean of {mn.NUM_REQUESTS_WAITING}.",
    ),
    "waiting_max": MetricSpec(
        "Max requests waiting",
        "requests",
        "lower",
        f"Max of {mn.NUM_REQUESTS_WAITING}.",
    ),
    "kv_cache_usage_mean": MetricSpec(
        "Mean KV-cache usage",
        "fraction",
        None,
        f"Mean of {mn.KV_CACHE_USAGE_PERC} (max over engines).",
    ),
    "kv_cache_usage_max": MetricSpec(
        "Max KV-cache usage",
        "fraction",
        None,
        f"Max of {mn.KV_CACHE_USAGE_PERC}.",
    ),
    "prefix_cache_hit_rate": MetricSpec(
        "Prefix-cache hit rate (server)",
        "fraction",
        "higher",
        f"delta {mn.PREFIX_CACHE_HITS} / delta {mn.PREFIX_CACHE_QUERIES}.",
    ),
    "client_kv_cache_hit_rate": MetricSpec(
        "KV-cache hit rate (client estimate)",
        "fraction",
        None,
        "EvalScope's estimate / 100.",
    ),
    "client_in_flight_mean": MetricSpec(
        "Mean requests in flight (client)",
        "requests",
        None,
        "Time-weighted in-flight requests from EvalScope's sqlite, over the point window.",
    ),
    "hisparse_hit_rate": MetricSpec(
        "HiSparse hot-buffer hit rate",
        "fraction",
        "higher",
        "delta hits / (delta hits + delta misses), when the connector exports it.",
    ),
    "hisparse_h2d_gib": MetricSpec(
        "HiSparse host-to-device traffic",
        "GiB",
        None,
        f"delta {mn.HISPARSE_HOST_TO_DEVICE_BYTES}.",
    ),
    "hisparse_host_cache_usage_mean": MetricSpec(
        "HiSparse host pool usage (mean)",
        "fraction",
        None,
        f"Mean of {mn.HISPARSE_HOST_CACHE_USAGE_PERC} over the point's samples (vLLM >= 0.32).",
    ),
    "hisparse_host_cache_usage_max": MetricSpec(
        "HiSparse host pool usage (max)",
        "fraction",
        None,
        f"Max of {mn.HISPARSE_HOST_CACHE_USAGE_PERC} over the point's samples (vLLM >= 0.32).",
    ),
    "hisparse_pending_transfers_mean": MetricSpec(
        "HiSparse pending page transfers (mean)",
        "pages",
        None,
        f"Mean of {mn.HISPARSE_PENDING_PAGE_TRANSFERS}, summed over engines (vLLM >= 0.32).",
    ),
    "hisparse_pending_transfers_max": MetricSpec(
        "HiSparse pending page transfers (max)",
        "pages",
        None,
        f"Max of {mn.HISPARSE_PENDING_PAGE_TRANSFERS}, summed over engines (vLLM >= 0.32).",
    ),
    "offload_load_gib": MetricSpec(
        "Offload loads (CPU to GPU)",
        "GiB",
        None,
        "delta of the OffloadingConnector load bytes.",
    ),
    "offload_store_gib": MetricSpec(
        "Offload stores (GPU to CPU)",
        "GiB",
        None,
        "delta of the OffloadingConnector store bytes.",
    ),
    "duration_s": MetricSpec("Point duration", "s", None, "EvalScope Test Duration."),
    **{  # from the point's per-request table (harness/analysis/goodput.py)
        f"p{p}_{q}_{unit}": MetricSpec(
            f"P{p} {label}", unit, "lower", f"{p}th percentile of the per-request {label}."
        )
        for p in (50, 90, 99)
        for q, unit, label in (
            ("ttft", "ms", "TTFT"),
            ("tpot", "ms", "TPOT"),
            ("itl", "ms", "inter-token gap"),
            ("e2e", "s", "end-to-end latency"),
        )
        if (p, q) not in ((99, "ttft"), (99, "tpot"))  # EvalScope's own rows, above
    },
    "goodput_rps": MetricSpec(
        "Goodput",
        "req/s",
        "higher",
        "Requests meeting every latency objective (workload slo) / point duration.",
    ),
    "slo_attainment": MetricSpec(
        "SLO attainment",
        "fraction",
        "higher",
        "Share of the point's requests meeting every latency objective (workload slo).",
    ),
}


# --------------------------------------------------------------------------- records


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ClientSummary(_Record):
    """The client's summary of a point in the project's names: EvalScope's
    benchmark_summary.json normalised across its key spellings (harness.client.evalscope), or
    the simulator's own client (harness.sim.run)."""

    total_requests: int
    success_requests: int
    failed_requests: int
    duration_s: float
    concurrency: int
    request_throughput: float | None = None
    output_throughput: float | None = None
    total_throughput: float | None = None
    mean_latency_s: float | None = None
    mean_ttft_ms: float | None = None
    mean_tpot_ms: float | None = None
    mean_itl_ms: float | None = None
    avg_input_tokens: float | None = None
    avg_output_tokens: float | None = None
    kv_cache_hit_rate_pct: float | None = None
    decoded_tok_per_iter: float | None = None
    raw: dict[str, Any] = Field(default_factory=dict)  # the file as EvalScope wrote it
    # fields EvalScope filled with a failure sentinel (-1, NaN), stored as null
    sentinels: list[str] = Field(default_factory=list)


class PointRecord(_Record):
    """One sweep point: what was asked, what the client saw, what the server reported."""

    schema_version: Literal["repro.point/1"] = POINT_SCHEMA
    point_id: str  # directory name, e.g. "p008-n0016-r0"
    label: str  # figure label, e.g. "c8"
    parallel: int
    number: int  # conversations
    repeat: int = 0
    dataset_offset: int  # the value passed to --dataset-offset
    conversations: list[int]  # dataset indices this point replays (EvalScope rotation)
    turns: int
    expected_requests: int  # conversations x turns
    started_at: float  # epoch s, child process start
    ended_at: float  # epoch s, child process exit
    window: tuple[float, float]  # epoch s, scrape window (first request .. last response)
    valid: bool
    invalid_reasons: list[str] = Field(default_factory=list)
    client: ClientSummary | None = None
    metrics: dict[str, float | None] = Field(default_factory=dict)  # keys from METRICS
    samples: int = 0  # scrapes that succeeded in the window
    scrape_gaps: int = 0  # scrapes that failed or timed out
    client_command: list[str] = Field(default_factory=list)
    client_exit_code: int | None = None
    overhead_s: float | None = None  # child wall time not spent serving requests
    server_restarts: int = 0  # counter resets seen in the window
    fidelity: dict[str, Any] = Field(default_factory=dict)  # workload fidelity checks
    notes: list[str] = Field(default_factory=list)


class CoherenceRecord(_Record):
    """An arm's output-correctness check (harness/coherence), run right after readiness."""

    schema_version: Literal["repro.coherence/1"] = "repro.coherence/1"
    verdict: Literal["coherent", "incoherent", "unjudged"]
    reason: str  # one line, e.g. "outputs disagree with offload512 after 3 tokens on 7/8 prompts"
    profile: str
    probe_set: str  # key, e.g. glm-v1
    reference: str | None = None  # what replies were compared against (arm name or run dir)
    allow_incoherent: bool = False  # --allow-incoherent: the points count anyway
    checks: dict[str, dict[str, Any]] = Field(default_factory=dict)  # name -> status/reason/...
    started_at: float
    finished_at: float

    @property
    def invalidates_points(self) -> bool:
        return self.verdict != "coherent" and not self.allow_incoherent


class JobFacts(_Record):
    """The scheduler job that ran a run (the latest one when a run was resumed as a new job).

    `state` and `reason` are Slurm's own words (`scontrol show job` / `sacct`), collected after
    the job ended: e.g. COMPLETED, CANCELLED, TIMEOUT (reason TimeLimit), NODE_FAIL, FAILED.
    """

    scheduler: Literal["slurm"] = "slurm"
    job_id: str  # Slurm's id; "<array job id>_<index>" for an array task
    array_index: int | None = None
    node: str | None = None
    partition: str | None = None
    state: str
    reason: str | None = None
    exit_code: str | None = None  # Slurm's "code:signal"
    submitted_at: float | None = None
    ended_at: float | None = None
    log: str | None = None  # the job's output file (submitit's folder)
    previous_job_ids: list[str] = Field(default_factory=list)  # earlier jobs of this run


class RunManifest(_Record):
    """Everything needed to know what a run was, and to redo it."""

    schema_version: Annotated[Literal["repro.run/2"], RUN_1_AS_2] = RUN_SCHEMA
    run_id: str
    status: Literal["running", "complete", "partial", "failed"]
    created_at: float
    finished_at: float | None = None
    harness_version: str
    engine: str  # the engine's record name (vllm | url | sim | a plug-in's); see engine_spec
    engine_spec: EngineSpec | None = None  # None in manifests older than the field: engine_record()
    # engine sim over HTTP: virtual time ran K x faster than the wall clock; client-side times
    # in the points are already multiplied back by K (None: real time)
    time_scale: float | None = None
    base_url: str
    profile_name: str
    profile: dict[str, Any]  # fully resolved profile (after extends and overrides)
    overrides: list[str] = Field(default_factory=list)  # --set KEY=VALUE, as given
    gpus: int  # divisor for per-GPU figures (max(profile.gpus, 1))
    serve_command: list[str] | None = None
    build: dict[str, Any] | None = None  # build provenance
    launch: dict[str, Any] | None = None  # launch provenance (env, host, KV capacity lines)
    dataset: dict[str, Any]  # at least path, sha256; plus the dataset manifest summary
    configuration_key: str = Field(validation_alias=CONFIG_KEY_NAMES)  # identity.py
    client: dict[str, Any]  # name, version, command template
    host: dict[str, Any] = Field(default_factory=dict)
    sweep: dict[str, Any]  # resolved sweep spec
    planned_points: list[str] = Field(default_factory=list)
    repeats: int = 1
    coherence: CoherenceRecord | None = None
    coherence_against: str | None = None  # --coherence-against: instead of the profile's reference
    # the server exited before it was ready: stage, exit_code, reason (its own error line, e.g.
    # vLLM's "To serve at least one request with the model's max seq len ...")
    start_failure: dict[str, Any] | None = None
    notes: list[str] = Field(default_factory=list)
    # host, pid and process start of the harness that runs it; server_pgid when it launched one
    owner: dict[str, Any] = Field(default_factory=dict)
    job: JobFacts | None = None  # set when the run was a scheduler job (harness.cluster)
    run_config: dict[str, Any] | None = None  # harness.run.config.RunConfig (older: None)

    def engine_record(self) -> EngineSpec | None:
        """The engine and its arguments: as recorded, or derived from the fields an older
        manifest has (None: an engine this harness never wrote without a spec)."""
        return self.engine_spec or legacy_engine_spec(self.model_dump(mode="json"))

    @property
    def simulated(self) -> bool:
        """The run's times and tokens came from the simulator, not a real server."""
        record = self.engine_record()
        return bool(record and record.simulated)

    @property
    def calibration(self) -> str | None:
        """A simulated run's step-cost calibration, as its summary, report and figures name it:
        the calibration file's stem, or "uncalibrated" (the roofline defaults). None for a real
        run, or a simulated one that recorded neither (docs/results.md, "Summaries")."""
        offline = (self.build or {}).get("calibration")  # repro simulate
        served = (self.launch or {}).get("sim")  # a sim server's facts: repro sweep --engine sim
        for facts, key in ((offline, "path"), (served, "calibration")):
            if self.simulated and isinstance(facts, dict) and key in facts:
                if not facts[key]:
                    return UNCALIBRATED
                return Path(facts[key]).stem + modified_text(facts.get("modified"))
        return None


class RunSummary(_Record):
    schema_version: Literal["repro.summary/2"] = SUMMARY_SCHEMA
    run_id: str
    calibration: str | None = None  # RunManifest.calibration (None: a real run)
    rows: list[dict[str, Any]]  # one per point: ids, validity, every METRICS key
    # --repeats N > 1: per (parallel, number) median and CI of each metric over valid repeats
    aggregates: list[dict[str, Any]] = Field(default_factory=list)


# --------------------------------------------------------------------------- writing


def _umask() -> int:
    """The process umask, read without changing it where /proc allows (os.umask sets it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temp file in the same folder and rename: readers never see half a file.
    An OSError names ``path`` (not the temp file, nor a parent that is in the way)."""
    try:
        _write_replace(path, text)
    except OSError as exc:
        if exc.filename == str(path):
            raise
        in_way = isinstance(exc, FileExistsError | NotADirectoryError)
        why = "a file is in the way" if in_way else exc.strerror
        blocker = f": {exc.filename}" if exc.filename else ""
        raise OSError(exc.errno, f"cannot write ({why}{blocker})", str(path)) from None


def _write_replace(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        # mkstemp makes the file 0600; give it the mode open() would have (0666 minus umask).
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def json_safe(value: Any) -> Any:
    """NaN and infinities become null: strict JSON, as results/README.md promises."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def atomic_write_json(path: Path, data: Any) -> None:
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="json")
    text = json.dumps(json_safe(data), indent=2, sort_keys=False, allow_nan=False)
    atomic_write_text(path, text + "\n")


# --------------------------------------------------------------------------- layout


def point_id(parallel: int, number: int, repeat: int = 0) -> str:
    return f"p{parallel:03d}-n{number:04d}-r{repeat}"


def _in_root(name: str) -> property:
    return property(lambda self: self.root / name, doc=f"<run>/{name}")


@dataclass(frozen=True)
class RunLayout:
    """Paths inside one run directory."""

    root: Path

    manifest = _in_root("manifest.json")
    server_log = _in_root("server.log")
    summary_json = _in_root("summary.json")
    summary_csv = _in_root("summary.csv")
    points_dir = _in_root("points")
    figures_dir = _in_root("figures")

    def point_dir(self, pid: str) -> Path:
        return self.points_dir / pid

    def point_json(self, pid: str) -> Path:
        return self.point_dir(pid) / "point.json"

    def samples_csv(self, pid: str) -> Path:
        return self.point_dir(pid) / "samples.csv"

    def evalscope_dir(self, pid: str) -> Path:
        return self.point_dir(pid) / "evalscope"


def summary_row(point: PointRecord, calibration: str | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "point_id": point.point_id,
        "label": point.label,
        "parallel": point.parallel,
        "number": point.number,
        "repeat": point.repeat,
        "valid": point.valid,
        "invalid_reasons": "; ".join(point.invalid_reasons),
        "samples": point.samples,
    }
    if calibration is not None:  # a simulated run's, in every row: summary.csv is flat
        row["calibration"] = calibration
    for key in METRICS:
        row[key] = point.metrics.get(key)
    return row


def write_summary(layout: RunLayout, run_id: str, points: list[PointRecord]) -> RunSummary:
    """summary.json and summary.csv from the points and the run's manifest (written first)."""
    cal = read_manifest(layout.root).calibration if layout.manifest.is_file() else None
    ordered = sorted(points, key=lambda p: (p.parallel, p.number, p.repeat))
    rows = [summary_row(p, cal) for p in ordered]
    summary = RunSummary(run_id=run_id, calibration=cal, rows=rows)
    atomic_write_json(layout.summary_json, summary)
    atomic_write_text(layout.summary_csv, rows_to_csv(rows))
    return summary


# --------------------------------------------------------------------------- reading


def _read_model(path: Path, model: type[BaseModel]) -> Any:
    if not path.exists():
        raise RunError(f"{path}: missing")
    data = read_json(path, "record", error=RunError)
    expected = model.model_fields["schema_version"].default
    found = data.get("schema_version") if isinstance(data, dict) else None
    if found != expected and (found, expected) != (RUN_1, RUN_SCHEMA):
        raise RunError(f"{path}: schema_version {found!r}, this harness reads {expected!r}")
    return validate(model, data, path, error=RunError)


def read_manifest(run_dir: Path) -> RunManifest:
    return _read_model(RunLayout(Path(run_dir)).manifest, RunManifest)


def read_point(path: Path) -> PointRecord:
    return _read_model(path, PointRecord)


@dataclass
class Run:
    """A run directory loaded for analysis: its manifest and its finished points."""

    root: Path
    manifest: RunManifest
    points: list[PointRecord]

    @property
    def name(self) -> str:
        return self.manifest.run_id

    def valid_points(self) -> list[PointRecord]:
        return [p for p in self.points if p.valid]


def load_run(run_dir: Path | str) -> Run:
    root = Path(run_dir)
    if not root.is_dir():
        raise RunError(f"{root}: not a run directory")
    layout = RunLayout(root)
    manifest = read_manifest(root)
    points = [read_point(p) for p in sorted(layout.points_dir.glob("*/point.json"))]
    points.sort(key=lambda p: (p.parallel, p.number, p.repeat))
    return Run(root=root, manifest=manifest, points=points)
