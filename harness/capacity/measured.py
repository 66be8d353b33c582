"""Predicted vs measured: a run's profile and workload through the calculator, beside occupancy.

The run's resolved profile gives the topology (`serve` keys as vLLM spells them) and the HiSparse
settings; the workload gives the context length per turn, from (in order of preference) the
built dataset's per-turn `prompt_tokens`, the dataset manifest, or the recipe arithmetic
context(t) = F + (t - 1)(S + max_tokens). A request's KV at the end of a turn is its context plus
`max_tokens` generated tokens; that is the sequence length the calculator is asked about.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.capacity.deployment import Deployment, make_deployment
from harness.capacity.formulas import SeqResult, evaluate
from harness.capacity.model import ModelSpec, find_model_for, load_model
from harness.config import read_yaml
from harness.errors import ConfigError
from harness.paths import DATASETS_DIR
from harness.results import PointRecord, Run, load_run

# "HiSparse HMA: X GiB host source (N blocks),
#  Y GiB shared GPU indexer/resident/hot pool (M blocks)"
HMA_LINE = re.compile(
    r"HiSparse HMA:\s*([\d.]+) GiB host source \(([\d,]+) blocks\),\s*([\d.]+) GiB shared GPU"
    r"[^(]*\(([\d,]+) blocks\)"
)


class NoCapacityModel(ConfigError):
    """The run's model has no file in launch/models/ (e.g. tiny CPU models)."""


@dataclass(frozen=True)
class RunContexts:
    """The context lengths a run's requests had, per turn (the simulator's conversations are
    harness.sim.client.Workload; a workload file is harness.serve.workloads.WorkloadSpec)."""

    source: str  # where the context lengths came from
    turn_contexts: list[float]  # mean prompt tokens per turn (turn 1 first)
    max_context: float
    max_tokens: int

    @property
    def mean_context(self) -> float:
        return statistics.fmean(self.turn_contexts)


@dataclass
class PointComparison:
    point: PointRecord
    mean_context: float
    max_context: float
    predicted_at_mean: int
    predicted_at_max: int
    measured: float | None
    fluid_at_mean: float = 0.0  # the same limit before flooring (see fluid_total)

    @property
    def bound(self) -> int:
        """What occupancy can reach: the capacity limit, or the client's concurrency if lower."""
        return min(self.point.parallel, self.predicted_at_mean)

    @property
    def ratio(self) -> float | None:
        if self.measured is None or self.predicted_at_mean == 0:
            return None
        return self.measured / self.predicted_at_mean

    @property
    def ratio_to_bound(self) -> float | None:
        if self.measured is None or self.bound == 0:
            return None
        return self.measured / self.bound


@dataclass
class RunComparison:
    run: Run
    deployment: Deployment
    hisparse: bool
    workload: RunContexts
    results: list[SeqResult]  # at the mean and max sequence length
    points: list[PointComparison]
    notes: list[str] = field(default_factory=list)

    def predicted(self, result: SeqResult) -> int:
        return predicted_total(result, self.hisparse)

    def markers(self) -> list[tuple[float, float, str]]:
        seq = self.workload.mean_context + self.workload.max_tokens
        return [(seq, p.measured, p.point.label) for p in self.points if p.measured is not None]

    def to_json(self) -> dict[str, Any]:
        return {
            "run": str(self.run.root),
            "run_id": self.run.manifest.run_id,
            "model": self.deployment.model.name,
            "hisparse": self.hisparse,
            "gpu": self.deployment.gpu,
            "tp": self.deployment.tp,
            "dp": self.deployment.dp,
            "kv_dtype": self.deployment.kv_dtype,
            "max_seqs": self.deployment.max_seqs,
            "spec_tokens": self.deployment.spec_tokens,
            "host_pool_gib": self.deployment.host_pool_gib,
            "kv_gib_per_gpu": self.deployment.kv_gib_per_gpu,
            "workload": {
                "source": self.workload.source,
                "turn_contexts": self.workload.turn_contexts,
                "mean_context": self.workload.mean_context,
                "max_context": self.workload.max_context,
                "max_tokens": self.workload.max_tokens,
            },
            "capacity": [r.to_json() for r in self.results],
            "points": [
                {
                    "point_id": c.point.point_id,
                    "label": c.point.label,
                    "parallel": c.point.parallel,
                    "valid": c.point.valid,
                    "mean_context": c.mean_context,
                    "max_context": c.max_context,
                    "predicted_at_mean": c.predicted_at_mean,
                    "predicted_at_max": c.predicted_at_max,
                    "fluid_at_mean": c.fluid_at_mean,
                    "bound": c.bound,
                    "measured_occupancy": c.measured,
                    "ratio": c.ratio,
                    "ratio_to_bound": c.ratio_to_bound,
                }
                for c in self.points
            ],
            "notes": self.notes,
        }


def predicted_total(result: SeqResult, hisparse: bool) -> int:
    """Requests the arm can keep running: HiSparse (MTP-aware if configured) or GPU-resident."""
    if not hisparse:
        return result.baseline_requests
    return (result.mtp or result.default).hisparse_requests


def fluid_total(result: SeqResult, hisparse: bool) -> float:
    """The limit before its last floor: pool / blocks per request, capped by max sequences.

    Requests of a multi-turn workload are at different lengths at any moment, so the number that
    fits on average is closer to pool / mean blocks than to the floored integer: at the blog's
    mean context the GPU-resident limit is 6260 / 1254 = 4.99, printed as 4, measured as 4.9.
    """
    dep = result.deployment
    variant = (result.mtp or result.default) if hisparse else result.default
    lim = variant.limits
    baseline = min(dep.max_seqs, lim.baseline_pool / lim.baseline_per_request)
    if not hisparse:
        return baseline * dep.dp
    offloaded = min(
        dep.max_seqs,
        lim.gpu_pool / lim.hisparse_gpu_per_request,
        lim.host_pool / lim.host_per_request,
    )
    return max(baseline, offloaded) * dep.dp


# --------------------------------------------------------------------------- profile


def _as_dict(value: Any, key: str) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ConfigError(f"profile serve key {key!r}: not valid JSON ({value!r})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"profile serve key {key!r}: expected a mapping, got {value!r}")
    return value


def _connectors(config: dict[str, Any]) -> list[dict[str, Any]]:
    """Flatten a kv-transfer-config (MultiConnector nests its children)."""
    found = [config] if config.get("kv_connector") else []
    extra = config.get("kv_connector_extra_config") or {}
    for child in extra.get("connectors") or []:
        if isinstance(child, dict):
            found.extend(_connectors(child))
    return found


@dataclass(frozen=True)
class ServeFacts:
    model_id: str
    tp: int
    dp: int
    ep: bool
    kv_dtype: str
    max_seqs: int | None
    gpu_memory_utilization: float | None
    max_model_len: int | None
    hisparse: bool
    host_pool_gib: float | None
    device_buffer_size: int | None
    spec_tokens: int | None
    offload_gib: float | None

    def topology(self) -> dict[str, Any]:
        """The `make_deployment` arguments the profile fixes."""
        return {
            "tp": self.tp,
            "dp": self.dp,
            "ep": self.ep,
            "kv_dtype": self.kv_dtype,
            "max_seqs": self.max_seqs,
            "gpu_memory_utilization": self.gpu_memory_utilization,
        }


def serve_facts(profile: dict[str, Any]) -> ServeFacts:
    # vLLM config files accept long option names with dashes or underscores
    serve = {str(k).replace("_", "-"): v for k, v in (profile.get("serve") or {}).items()}
    attention = _as_dict(serve.get("attention-config"), "attention-config")
    hisparse_config = attention.get("hisparse_config")
    transfer = _as_dict(serve.get("kv-transfer-config"), "kv-transfer-config")
    host_pool = None
    offload_gib = None
    hisparse = isinstance(hisparse_config, dict)
    for conn in _connectors(transfer):
        extra = conn.get("kv_connector_extra_config") or {}
        if conn.get("kv_connector") == "HiSparseConnector":
            hisparse = True
            if extra.get("host_pool_gib") is not None:
                host_pool = extra["host_pool_gib"]
        elif conn.get("kv_connector") == "OffloadingConnector" and "cpu_bytes_to_use" in extra:
            offload_gib = float(extra["cpu_bytes_to_use"]) / 2**30
    if isinstance(hisparse_config, dict) and hisparse_config.get("host_pool_gib") is not None:
        host_pool = hisparse_config["host_pool_gib"]
    spec = _as_dict(serve.get("speculative-config"), "speculative-config")
    kv_dtype = str(serve.get("kv-cache-dtype", "auto")).lower()
    util = serve.get("gpu-memory-utilization")
    return ServeFacts(
        model_id=str(profile.get("model", "")),
        tp=int(serve.get("tensor-parallel-size", 1)),
        dp=int(serve.get("data-parallel-size", 1)),
        ep=bool(serve.get("enable-expert-parallel", False)),
        kv_dtype="fp8" if kv_dtype.startswith("fp8") else "bf16",
        max_seqs=int(serve["max-num-seqs"]) if serve.get("max-num-seqs") else None,
        gpu_memory_utilization=float(util) if util is not None else None,
        max_model_len=int(serve["max-model-len"]) if serve.get("max-model-len") else None,
        hisparse=hisparse,
        host_pool_gib=float(host_pool) if host_pool is not None else None,
        device_buffer_size=(
            int(hisparse_config["device_buffer_size"])
            if isinstance(hisparse_config, dict) and hisparse_config.get("device_buffer_size")
            else None
        ),
        spec_tokens=int(spec["num_speculative_tokens"])
        if spec.get("num_speculative_tokens")
        else None,
        offload_gib=offload_gib,
    )


def _gpu_from_host(host: dict[str, Any]) -> str | None:
    text = json.dumps(host).upper()
    for name in ("B300", "B200", "H200"):
        if name in text:
            return name.lower()
    return None


# --------------------------------------------------------------------------- workload


def _dataset_json_contexts(path: Path, points: list[PointRecord]) -> dict[str, list[list[float]]]:
    """Per point: prompt_tokens per turn of each conversation it replayed (docs/recipe.md §6.7)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    conversations = data.get("conversations") if isinstance(data, dict) else None
    if not conversations:
        return {}
    out: dict[str, list[list[float]]] = {}
    for point in points:
        rows = []
        for index in point.conversations or range(len(conversations)):
            turns = conversations[index % len(conversations)][: point.turns or None]
            counts = [t.get("prompt_tokens") for t in turns if isinstance(t, dict)]
            numbers = [float(c) for c in counts if isinstance(c, int | float)]
            if counts and len(numbers) == len(counts):
                rows.append(numbers)
        if rows:
            out[point.point_id] = rows
    return out


def _manifest_contexts(manifest: Any, points: list[PointRecord]) -> dict[str, list[list[float]]]:
    """Per point, from the dataset manifest's per-conversation, per-turn templated prompt lengths.

    The builder records `conversations[i].turns[t].templated_prompt_tokens` (the chat-templated
    context with the earlier replies counted at the recipe's output estimate).
    """
    conversations = manifest.get("conversations") if isinstance(manifest, dict) else None
    if not isinstance(conversations, list) or not conversations:
        return {}
    table: dict[int, list[float]] = {}
    for position, conversation in enumerate(conversations):
        turns = conversation.get("turns") if isinstance(conversation, dict) else None
        if not isinstance(turns, list):
            return {}
        values = [t.get("templated_prompt_tokens") for t in turns if isinstance(t, dict)]
        numbers = [float(v) for v in values if isinstance(v, int | float)]
        if not values or len(numbers) != len(values):
            return {}
        table[int(conversation.get("index", position))] = numbers
    out: dict[str, list[list[float]]] = {}
    for point in points:
        indices = point.conversations or sorted(table)
        rows = [
            table[i % len(table)][: point.turns or None] for i in indices if i % len(table) in table
        ]
        if rows:
            out[point.point_id] = rows
    return out


def _find_turn_tokens(manifest: Any) -> list[float] | None:
    """A per-turn token list somewhere in the dataset manifest (mean per turn if nested)."""
    if isinstance(manifest, dict):
        for key, value in manifest.items():
            lowered = key.lower()
            if "turn" in lowered and "token" in lowered and isinstance(value, list) and value:
                if all(isinstance(v, int | float) for v in value):
                    return [float(v) for v in value]
                if all(isinstance(v, list) and v for v in value):
                    width = min(len(v) for v in value)
                    return [statistics.fmean(float(v[t]) for v in value) for t in range(width)]
        for value in manifest.values():
            found = _find_turn_tokens(value)
            if found:
                return found
    return None


def _find_key(data: Any, key: str) -> Any:
    if isinstance(data, dict):
        if key in data:
            return data[key]
        for value in data.values():
            found = _find_key(value, key)
            if found is not None:
                return found
    return None


def _recipe_numbers(run: Run) -> dict[str, Any]:
    numbers: dict[str, Any] = {}
    for key in ("first_turn_length", "subsequent_turn_length", "num_turns"):
        value = _find_key(run.manifest.dataset, key)
        if value is not None:
            numbers[key] = value
    if len(numbers) < 3:
        recipe = _find_key(run.manifest.dataset, "recipe")
        candidates = [Path(recipe)] if isinstance(recipe, str) else []
        spec = run.manifest.dataset.get("spec") or run.manifest.sweep.get("dataset")
        if isinstance(spec, str):
            candidates += [Path(spec), DATASETS_DIR / f"{spec}.yaml"]
        for path in candidates:
            if path.suffix in (".yaml", ".yml") and path.is_file():
                data = read_yaml(path, "dataset recipe") or {}
                for key in ("first_turn_length", "subsequent_turn_length", "num_turns"):
                    numbers.setdefault(key, _find_key(data, key))
                break
    return numbers


def run_contexts(run: Run) -> tuple[RunContexts, dict[str, list[list[float]]]]:
    """The run's context lengths: a run-wide summary and, when known, per-point rows."""
    max_tokens = int(run.manifest.sweep.get("max_tokens") or 220)
    max_turns = run.manifest.sweep.get("max_turns")
    dataset_path = run.manifest.dataset.get("path")
    dataset_file = Path(str(dataset_path)) if dataset_path else None
    embedded = run.manifest.dataset.get("manifest")
    per_point = _manifest_contexts(embedded, run.points)
    source = "templated_prompt_tokens in the dataset manifest"
    sidecar = dataset_file.with_name(dataset_file.name + ".manifest.json") if dataset_file else None
    if not per_point and sidecar is not None and sidecar.is_file():
        try:
            per_point = _manifest_contexts(json.loads(sidecar.read_text("utf-8")), run.points)
            source = f"templated_prompt_tokens in {sidecar}"
        except (OSError, json.JSONDecodeError):
            per_point = {}
    if not per_point and dataset_file is not None and dataset_file.suffix == ".json":
        try:
            if dataset_file.is_file():
                per_point = _dataset_json_contexts(dataset_file, run.points)
                source = f"prompt_tokens in {dataset_file}"
        except (OSError, json.JSONDecodeError, AttributeError, TypeError):
            per_point = {}
    if per_point:
        rows = [row for rows in per_point.values() for row in rows]
        width = min(len(r) for r in rows)
        turns = [statistics.fmean(r[t] for r in rows) for t in range(width)]
        peak = max(max(r) for r in rows)
        return RunContexts(source, turns, peak, max_tokens), per_point

    listed = _find_turn_tokens(run.manifest.dataset.get("manifest") or run.manifest.dataset)
    if listed:
        if max_turns:
            listed = listed[: int(max_turns)]
        return RunContexts("dataset manifest", listed, max(listed), max_tokens), {}

    numbers = _recipe_numbers(run)
    missing = [
        k
        for k in ("first_turn_length", "subsequent_turn_length", "num_turns")
        if numbers.get(k) is None
    ]
    if missing:
        raise ConfigError(
            f"{run.root}: cannot tell the workload's context lengths: no per-turn prompt_tokens in "
            f"the dataset, and the dataset manifest/recipe lacks {', '.join(missing)}"
        )
    first, later = int(numbers["first_turn_length"]), int(numbers["subsequent_turn_length"])
    turn_count = int(numbers["num_turns"])
    if max_turns:
        turn_count = min(turn_count, int(max_turns))
    contexts = [float(first + (t - 1) * (later + max_tokens)) for t in range(1, turn_count + 1)]
    return (
        RunContexts("recipe: F + (t-1)(S + max_tokens)", contexts, max(contexts), max_tokens),
        {},
    )


# --------------------------------------------------------------------------- comparison


def resolve_run_model(run: Run, model: str | None = None) -> ModelSpec:
    if model:
        return load_model(model)
    profile = run.manifest.profile
    model_id = str(profile.get("model", ""))
    found = find_model_for(model_id)
    if found is None:
        served = (profile.get("serve") or {}).get("served-model-name")
        if isinstance(served, str):
            found = find_model_for(served)
    if found is None:
        raise NoCapacityModel(
            f"{run.root}: no capacity model applies to model {model_id!r} (no file in "
            f"launch/models/ lists it in hub_ids; pass --model NAME to force one)"
        )
    return found


def _run_deployment(
    loaded: Run,
    spec: ModelSpec,
    facts: ServeFacts,
    options: dict[str, Any],
    notes: list[str],
) -> Deployment:
    """The calculator deployment the run's profile describes (``options``: the CLI's
    gpu, hbm_gib, kv_gib_per_gpu, system_ram_gib, indexer_offload_gib overrides)."""
    gpu, hbm_gib = options["gpu"], options["hbm_gib"]
    launch = loaded.manifest.launch or {}
    if gpu is None and hbm_gib is None:
        gpu = _gpu_from_host(loaded.manifest.host) or _gpu_from_host(launch.get("host") or {})
        if gpu is None:
            gpu = "h200"
            notes.append("GPU type not found in the run's host facts; assuming H200 (use --gpu)")
    hot_rows = facts.device_buffer_size
    if facts.max_seqs is None:
        notes.append(
            "profile has no max-num-seqs; using the calculator's default "
            f"{spec.calculator_max_seqs}"
        )
    offload = options["indexer_offload_gib"]
    ram = options["system_ram_gib"]
    return make_deployment(
        spec,
        gpu=gpu,
        hbm_gib=hbm_gib,
        hot_rows=hot_rows,
        spec_tokens=facts.spec_tokens if hot_rows is None else None,
        host_pool_gib=facts.host_pool_gib if facts.hisparse else None,
        indexer_offload_gib=offload if offload is not None else (facts.offload_gib or 0.0),
        system_ram_gib=ram if ram is not None else 4096.0,
        kv_gib_per_gpu=options["kv_gib_per_gpu"],
        **facts.topology(),
    )


def _pool_notes(loaded: Run, dep: Deployment, facts: ServeFacts) -> list[str]:
    """How vLLM's own KV pool (from the launch log) and the profile compare with the model."""
    notes = []
    kv_capacity = (loaded.manifest.launch or {}).get("kv_capacity") or {}
    kv_tokens = kv_capacity.get("kv_cache_tokens")
    for line in kv_capacity.get("lines") or []:
        match = HMA_LINE.search(str(line))
        if match and facts.hisparse:
            gpu_gib, pages = float(match.group(3)), int(match.group(4).replace(",", ""))
            notes.append(
                f"vLLM's HiSparse GPU pool: {pages:,} pages ({gpu_gib:g} GiB); the calculator "
                f"assumes {dep.kv_gib_per_gpu:.1f} GiB/GPU (rerun with --kv-gib-per-gpu "
                f"{gpu_gib:g} to predict from vLLM's own pool)"
            )
    if isinstance(kv_tokens, int) and kv_tokens > 0 and not facts.hisparse:
        implied = kv_tokens / dep.baseline_block_tokens * dep.baseline_block_bytes / 2**30
        notes.append(
            f"vLLM reported a GPU KV cache of {kv_tokens:,} tokens; at "
            f"{dep.baseline_block_bytes:,} B per {dep.baseline_block_tokens}-token block that "
            f"is {implied:.1f} GiB/GPU against the calculator's {dep.kv_gib_per_gpu:.1f} (rerun "
            f"with --kv-gib-per-gpu {implied:.1f} to predict from vLLM's own pool)"
        )
    profile_gpus = loaded.manifest.profile.get("gpus")
    if isinstance(profile_gpus, int) and profile_gpus > 0 and profile_gpus != dep.gpus:
        notes.append(f"profile says gpus: {profile_gpus}, but DP x TP = {dep.gpus}")
    if facts.hisparse and facts.host_pool_gib is None:
        notes.append(
            "HiSparse host_pool_gib not found in the profile; assuming a non-limiting pool"
        )
    return notes


def compare_run(
    run: Run | Path | str,
    *,
    model: str | None = None,
    gpu: str | None = None,
    hbm_gib: float | None = None,
    kv_gib_per_gpu: float | None = None,
    system_ram_gib: float | None = None,
    indexer_offload_gib: float | None = None,
) -> RunComparison:
    loaded = run if isinstance(run, Run) else load_run(run)
    spec = resolve_run_model(loaded, model)
    facts = serve_facts(loaded.manifest.profile)
    notes: list[str] = []
    options = {
        "gpu": gpu,
        "hbm_gib": hbm_gib,
        "kv_gib_per_gpu": kv_gib_per_gpu,
        "system_ram_gib": system_ram_gib,
        "indexer_offload_gib": indexer_offload_gib,
    }
    dep = _run_deployment(loaded, spec, facts, options, notes)
    notes += _pool_notes(loaded, dep, facts)
    workload, per_point = run_contexts(loaded)
    seq_mean = math.ceil(workload.mean_context) + workload.max_tokens
    seq_max = math.ceil(workload.max_context) + workload.max_tokens
    if facts.max_model_len and seq_max > facts.max_model_len:
        notes.append(f"longest sequence {seq_max:,} exceeds max-model-len {facts.max_model_len:,}")
    cache: dict[int, SeqResult] = {}

    def at(seq: int) -> SeqResult:
        if seq not in cache:
            cache[seq] = evaluate(dep, seq)
        return cache[seq]

    comparisons = []
    for point in loaded.points:
        rows = per_point.get(point.point_id)
        if rows:
            mean_ctx = statistics.fmean(v for r in rows for v in r)
            max_ctx = max(max(r) for r in rows)
        else:
            turn_list = workload.turn_contexts[: point.turns or None]
            mean_ctx = statistics.fmean(turn_list)
            max_ctx = max(turn_list)
        at_mean = at(math.ceil(mean_ctx) + workload.max_tokens)
        comparisons.append(
            PointComparison(
                point=point,
                mean_context=mean_ctx,
                max_context=max_ctx,
                predicted_at_mean=predicted_total(at_mean, facts.hisparse),
                predicted_at_max=predicted_total(
                    at(math.ceil(max_ctx) + workload.max_tokens), facts.hisparse
                ),
                measured=point.metrics.get("occupancy"),
                fluid_at_mean=fluid_total(at_mean, facts.hisparse),
            )
        )
    return RunComparison(
        run=loaded,
        deployment=dep,
        hisparse=facts.hisparse,
        workload=workload,
        results=[at(seq_mean), at(seq_max)] if seq_max != seq_mean else [at(seq_mean)],
        points=comparisons,
        notes=notes + list(dep.notes),
    )
