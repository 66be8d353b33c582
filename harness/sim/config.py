"""Profile -> simulated engine. Inputs are only: the profile's `serve:` block, the model file in
launch/models (through harness.capacity), the GPU facts, the workload and a calibration file.

Anything the engine cannot model is an error naming the profile, key and value; serve keys
that do not change performance (parsers, names) are listed in `NO_EFFECT`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.capacity.deployment import make_deployment, mtp_hot_rows
from harness.capacity.formulas import capacity_at
from harness.capacity.model import ModelSpec, find_model_for
from harness.config import read_yaml
from harness.errors import ConfigError
from harness.paths import REPO_ROOT
from harness.sim.cost import FIT_PARAMS, Roofline
from harness.sim.engine import Engine
from harness.sim.facts import compute_facts, gpu_facts
from harness.sim.hisparse_layout import served_hisparse_pool
from harness.sim.intervals import interval80
from harness.sim.mtp import Mtp
from harness.sim.pool import (
    connector_pages_per_block,
    kv_budget,
    residency_pools,
    served_bytes_scale,
    served_plain_pool,
    token_bytes,
)
from harness.sim.residency import Channel, GpuResidency, HiSparseResidency, OffloadResidency
from harness.sim.scheduler import Scheduler
from harness.sim.startup import (
    EngineRefused,
    admission_window_blocks,
    check_host_pool,
    check_kv_pool,
    kv_pool,
)

CALIBRATION_SCHEMA = "repro.sim-calibration/1"
MODELLED = {
    "tensor-parallel-size",
    "data-parallel-size",
    "kv-cache-dtype",
    "gpu-memory-utilization",
    "max-model-len",
    "max-num-batched-tokens",
    "max-num-seqs",
    "enable-prefix-caching",
    "attention-config",
    "kv-transfer-config",
    "speculative-config",
    "num-gpu-blocks-override",
}
NO_EFFECT = {
    "served-model-name",
    "trust-remote-code",
    "enable-auto-tool-choice",
    "tool-call-parser",
    "reasoning-parser",
    "dtype",
    "enable-prompt-tokens-details",  # adds cached_tokens to the usage of each response
}
CONNECTORS = {"OffloadingConnector"}
OFFLOAD_SPECS = {"TieringOffloadingSpec", "CPUOffloadingSpec"}
SPEC_METHODS = {"mtp"}
DEFAULT_GPU = "h200"


INTERVAL_METRICS = ("occupancy", "interactivity", "throughput_per_gpu")


@dataclass(frozen=True)
class Calibration:
    model: str
    gpu: str
    params: dict[str, float]
    kv_gib_per_gpu: float | None = None
    path: Path | None = None
    data: dict[str, Any] = field(default_factory=dict)
    residency: str = "constant-miss"  # RESIDENCY_MODELS: the mechanism it was fitted with


def load_calibration(path: Path) -> Calibration:
    data = read_yaml(path, "calibration file")  # missing, unreadable or bad YAML: one line
    if not isinstance(data, dict) or data.get("schema") != CALIBRATION_SCHEMA:
        raise ConfigError(f"{path}: schema must be {CALIBRATION_SCHEMA!r}")
    params = data.get("params") or {}
    for key, value in params.items():
        if key not in FIT_PARAMS:
            raise ConfigError(
                f"{path}: params.{key}: not a simulator parameter (known: {', '.join(FIT_PARAMS)})"
            )
        low, high = FIT_PARAMS[key]
        if not isinstance(value, int | float) or not low <= value <= high:
            raise ConfigError(f"{path}: params.{key}: {value!r} outside [{low}, {high}]")
    for key in ("model", "gpu"):
        if not isinstance(data.get(key), str):
            raise ConfigError(f"{path}: {key}: required (the model/GPU it was fitted for)")
    kv = data.get("kv_gib_per_gpu")
    intervals = data.get("intervals") or {}
    tables = {"sigma_log": intervals.get("sigma_log") or {}}
    by_profile = intervals.get("sigma_log_by_profile") or {}
    if not isinstance(by_profile, dict):
        raise ConfigError(f"{path}: intervals.sigma_log_by_profile: not a mapping")
    for name, table in by_profile.items():
        tables[f"sigma_log_by_profile.{name}"] = table
    for where, table in tables.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: intervals.{where}: not a mapping")
        for key, value in table.items():
            if key not in INTERVAL_METRICS or not isinstance(value, int | float) or value < 0:
                raise ConfigError(
                    f"{path}: intervals.{where}.{key}: {value!r} is not a metric's sigma"
                )
    residency = data.get("residency", "constant-miss")
    if residency not in RESIDENCY_MODELS:
        raise ConfigError(
            f"{path}: residency: {residency!r} (known: {', '.join(RESIDENCY_MODELS)})"
        )
    return Calibration(
        data["model"],
        data["gpu"],
        {k: float(v) for k, v in params.items()},
        None if kv is None else float(kv),
        Path(path),
        data,
        residency,
    )


# How HiSparse residency and offload stores are modelled: "constant-miss" (a host-resident
# request misses `miss_rate` of its top-K every step; stores at release) or "vllm-0.32" (the
# coordinator's switch conditions and lazy unpin, misses only on reused pages, staging of the
# missing rows only, offload stores every step; residency.py cites the sources).
RESIDENCY_MODELS = ("constant-miss", "vllm-0.32")
CALIBRATIONS_DIR = REPO_ROOT / "launch" / "calibrations"
NO_CALIBRATION = "none"  # `--calibration none`: the roofline defaults, asked for explicitly
UNCALIBRATED = "uncalibrated (roofline defaults)"


def find_calibration(model: str, gpu: str, directory: Path = CALIBRATIONS_DIR) -> Path | None:
    """The calibration fitted for this model and GPU (first by file name), or None."""
    for path in sorted(directory.glob("*.yaml")):
        data = read_yaml(path, "calibration file")
        if isinstance(data, dict) and (data.get("model"), data.get("gpu")) == (model, gpu):
            return path
    return None


def resolve_calibration(
    spec: Path | str | None, model_id: str, gpu: str | None = None
) -> Calibration | None:
    """What a run uses: a named file; `none` (roofline defaults); or, unnamed, the calibration
    that matches the profile's model and GPU (None, i.e. uncalibrated, when none does)."""
    if spec is not None and str(spec) == NO_CALIBRATION and not Path(spec).is_file():
        return None
    if spec is not None:
        return load_calibration(Path(spec))
    model = find_model_for(model_id)
    if model is None:
        return None  # setup_from_profile names the missing model file
    found = find_calibration(model.name, gpu or DEFAULT_GPU)
    return load_calibration(found) if found else None


def calibration_label(cal: Calibration | None) -> str:
    """How a run names its step cost in summaries, reports and figure labels."""
    if cal is None or cal.path is None:
        return UNCALIBRATED
    return f"calibrated ({cal.path.name})"


@dataclass
class SimSetup:
    """Everything needed to build a fresh engine for one run (one server lifetime)."""

    profile_name: str
    model: ModelSpec
    gpu: str
    tp: int
    policy: str
    pool_units: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    prefix_caching: bool
    spec_tokens: int
    roofline: Roofline
    policy_args: dict[str, Any]
    served_model_name: str
    facts: dict[str, Any]
    # log-space sigma per metric from the calibration (None: uncalibrated, no interval)
    interval_sigma: dict[str, float] | None = None
    residency: str = "constant-miss"  # or "vllm-0.32": RESIDENCY_MODELS

    def interval80(self, metrics: dict[str, Any]) -> dict[str, list[float]] | None:
        """80 % prediction interval of each headline metric: value x exp(+-1.2816 sigma)."""
        return interval80(self.interval_sigma, metrics) if self.interval_sigma else None

    def with_params(self, **params: float) -> SimSetup:
        return replace(self, roofline=replace(self.roofline, **params))  # type: ignore[arg-type]  # FIT_PARAMS fields are floats

    def build(self) -> Engine:
        block_tokens = self.model.block_tokens.baseline
        if self.policy == "hisparse":
            block_tokens = self.model.block_tokens.gpu
        pol: GpuResidency
        args = dict(self.policy_args)
        scale = self.roofline.host_bytes_scale
        for key in ("cpu_blocks", "indexer_cpu_blocks", "host_blocks"):
            if key in args:
                args[key] = int(args[key] / scale)
        for key in ("block_bytes", "indexer_block_bytes"):
            if key in args:
                args[key] = int(args[key] * scale)
        v032 = self.residency == "vllm-0.32"
        if v032 and self.policy in ("offload", "hisparse"):
            args["copy_pages"] = connector_pages_per_block(
                self.model, self.policy, self.spec_tokens
            )
        if self.policy in ("offload", "hisparse"):
            args["store_every_step"] = v032
        if self.policy == "hisparse":
            args["lazy_unpin"] = v032
            args["window_blocks"] = admission_window_blocks(
                "hisparse",
                "vllm-0.32",
                self.max_num_batched_tokens,
                self.max_model_len,
                block_tokens,
            )
        if self.policy == "offload":
            pol = OffloadResidency(
                self.pool_units,
                block_tokens,
                h2d=Channel(1.0),
                prefix_caching=self.prefix_caching,
                **args,
            )
        elif self.policy == "hisparse":
            pol = HiSparseResidency(
                self.pool_units,
                block_tokens,
                h2d=Channel(1.0),
                prefix_caching=self.prefix_caching,
                **args,
            )
        else:
            pol = GpuResidency(self.pool_units, block_tokens, self.prefix_caching)
        pol.drop_last_hit_block = self.spec_tokens > 0
        rf = self.roofline
        accept = rf.acceptance_length if self.spec_tokens else 1.0
        mtp = Mtp(self.spec_tokens, accept, rf.acceptance_spread)
        sched = Scheduler(
            pol,
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            mtp=mtp,
        )
        labels = {"engine": "0", "model_name": self.served_model_name}
        return Engine(
            sched,
            rf,
            topk=self.model.architecture.index_topk,
            labels=labels,
            row_bytes=rf.row_bytes,
        )


def _int(where: str, key: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{where}: {key}: {value!r} must be an integer >= {minimum}")
    return value


def _spec_tokens(where: str, serve: dict[str, Any]) -> int:
    spec = serve.get("speculative-config")
    if spec is None:
        return 0
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: serve.speculative-config: {spec!r} is not a mapping")
    _known(where, "serve.speculative-config.method", spec.get("method"), SPEC_METHODS)
    for key in spec:
        if key not in ("method", "num_speculative_tokens"):
            raise ConfigError(f"{where}: serve.speculative-config.{key}: not modelled")
    return _int(
        where,
        "serve.speculative-config.num_speculative_tokens",
        spec.get("num_speculative_tokens"),
        0,
    )


def _known(where: str, key: str, value: Any, known: Collection[str]) -> None:
    if value not in known:
        raise ConfigError(
            f"{where}: {key}: {value!r} is not modelled (known: {', '.join(sorted(known))})"
        )


def _connector(where: str, serve: dict[str, Any]) -> int | None:
    """cpu_bytes_to_use of the OffloadingConnector, or None without a connector."""
    kv = serve.get("kv-transfer-config")
    if kv is None:
        return None
    name = kv.get("kv_connector") if isinstance(kv, dict) else kv
    _known(where, "serve.kv-transfer-config.kv_connector", name, CONNECTORS)
    extra = kv.get("kv_connector_extra_config") or {}
    spec = extra.get("spec_name", "CPUOffloadingSpec")
    if spec not in OFFLOAD_SPECS:
        raise ConfigError(
            f"{where}: serve.kv-transfer-config.kv_connector_extra_config."
            f"spec_name: {spec!r} is not modelled"
        )
    return _int(
        where,
        "serve.kv-transfer-config.kv_connector_extra_config.cpu_bytes_to_use",
        extra.get("cpu_bytes_to_use"),
        0,
    )


def _host_pool_gib(where: str, serve: dict[str, Any]) -> float | None:
    att = serve.get("attention-config")
    if att is None:
        return None
    if not isinstance(att, dict) or set(att) - {"hisparse_config"}:
        raise ConfigError(
            f"{where}: serve.attention-config: {att!r}: only hisparse_config is modelled"
        )
    hs = att.get("hisparse_config") or {}
    if set(hs) - {"host_pool_gib"}:
        raise ConfigError(
            f"{where}: serve.attention-config.hisparse_config: keys "
            f"{sorted(set(hs) - {'host_pool_gib'})} are not modelled"
        )
    value = hs.get("host_pool_gib")
    if not isinstance(value, int | float) or value <= 0:
        raise ConfigError(
            f"{where}: serve.attention-config.hisparse_config.host_pool_gib: {value!r} must be > 0"
        )
    return float(value)


def setup_from_profile(
    profile: Any,
    calibration: Calibration | None = None,
    params: dict[str, float] | None = None,
    gpu: str | None = None,
    residency: str | None = None,
) -> SimSetup:
    """The engine setup for a loaded `harness.serve.profiles.Profile` on `gpu` (default h200);
    `residency` (RESIDENCY_MODELS) defaults to the calibration's, else constant-miss."""
    where = f"profile {profile.name} ({profile.source})"
    serve = dict(profile.serve)
    model, gpu = _check_inputs(profile, serve, calibration, gpu, where)
    tp, dp, spec, dtype, max_seqs = _serve_shape(where, serve, profile.gpus, model)
    fitted = dict(calibration.params) if calibration else {}
    fitted.update(params or {})
    kv_override = fitted.pop("kv_gib_per_gpu", None)
    runtime_gib = fitted.pop("runtime_gib", None)
    if kv_override is None and calibration is not None:
        kv_override = calibration.kv_gib_per_gpu
    host_gib = _host_pool_gib(where, serve)
    cf = compute_facts(model.name, where)
    util = serve.get("gpu-memory-utilization", model.gpu_memory_utilization)
    derived = kv_override is None and runtime_gib is not None
    if derived and "host_bytes_scale" not in fitted:
        fitted["host_bytes_scale"] = served_bytes_scale(model, dtype, spec)
    try:
        kv = kv_budget(model, gpu, tp, dtype, util, spec, cf, kv_override, runtime_gib)
        dep = make_deployment(
            model,
            gpu=gpu,
            tp=tp,
            dp=dp,
            kv_dtype=dtype,
            max_seqs=max_seqs,
            spec_tokens=spec if host_gib is not None else None,
            gpu_memory_utilization=util,
            kv_gib_per_gpu=kv,
        )
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    rows = mtp_hot_rows(spec, model.architecture.index_topk) if spec else model.default_hot_rows
    policy, pool, policy_args = residency_pools(dep, rows, host_gib, _connector(where, serve))
    residency = residency or (calibration.residency if calibration else "constant-miss")
    if "num-gpu-blocks-override" in serve:
        pool = _int(where, "serve.num-gpu-blocks-override", serve["num-gpu-blocks-override"])
    elif derived:
        pool -= 1  # vLLM's BlockPool holds block 0 back as the null block (v1/core/block_pool.py)
    roof = _roofline(model, dtype, gpu_facts(gpu, where), cf, tp)
    roof.spec_tokens = spec
    _apply_params(roof, fitted)
    max_len = _int(where, "serve.max-model-len", serve.get("max-model-len", 142000))
    batched = _int(where, "serve.max-num-batched-tokens", serve.get("max-num-batched-tokens", 8192))
    window = admission_window_blocks(policy, residency, batched, max_len, model.block_tokens.gpu)
    overridden = "num-gpu-blocks-override" in serve
    unit_bytes: int | None = None
    layout_facts: dict[str, float] = {}
    given, runtime = (pool if overridden else None), (runtime_gib if derived else None)
    if policy == "hisparse" and residency == "vllm-0.32":  # vLLM 0.32.0's own page geometry
        pool, unit_bytes, layout_facts = served_hisparse_pool(
            model, dep, policy_args, given, runtime, spec, cf, max_seqs, batched
        )
    elif residency == "vllm-0.32":  # vLLM's blocks hold the served rows (docs/simulator.md §3)
        pool, unit_bytes = served_plain_pool(model, dep, spec, cf, runtime, given, pool)
    kv_check = _refuse_like_vllm(
        where, policy, pool, dep, policy_args, max_len, overridden, roof, window, unit_bytes
    )
    facts = {
        "kv_gib_per_gpu": dep.kv_gib_per_gpu,
        "pool_units": pool,
        "policy": policy,
        "gpu": gpu,
        "hot_rows": rows,
        **policy_args,
        "baseline_limit_at_80k": capacity_at(dep, 80000, rows).baseline_limit,
        "hisparse_limit_at_80k": capacity_at(dep, 80000, rows).hisparse_limit,
        **kv_check,
        **layout_facts,
    }
    return SimSetup(
        profile_name=profile.name,
        model=model,
        gpu=gpu,
        tp=tp,
        policy=policy,
        pool_units=pool,
        max_num_seqs=max_seqs,
        max_num_batched_tokens=batched,
        max_model_len=max_len,
        prefix_caching=bool(serve.get("enable-prefix-caching", True)),
        spec_tokens=spec,
        roofline=roof,
        policy_args=policy_args,
        served_model_name=profile.served_model_name,
        facts=facts,
        # The interval is the fit's: a parameter moved off it (`--set sim.NAME=VALUE`) voids it.
        interval_sigma=None if params else _interval_sigma(calibration, profile.name),
        residency=residency,
    )


def _serve_shape(
    where: str, serve: dict[str, Any], gpus: int, model: ModelSpec
) -> tuple[int, int, int, str, int]:
    """(TP, DP, speculative tokens, KV dtype, max-num-seqs) of a profile's serve block."""
    tp = _int(where, "serve.tensor-parallel-size", serve.get("tensor-parallel-size", 1))
    dp = _int(where, "serve.data-parallel-size", serve.get("data-parallel-size", 1))
    if dp != 1:
        raise ConfigError(f"{where}: serve.data-parallel-size: {dp}: only DP1 is modelled")
    if gpus != tp:
        raise ConfigError(f"{where}: gpus: {gpus} differs from TP {tp} (DP1)")
    dtype = serve.get("kv-cache-dtype", "fp8")
    if dtype not in model.kv_layouts:
        raise ConfigError(f"{where}: serve.kv-cache-dtype: {dtype!r} not in {model.source_file}")
    max_seqs = _int(where, "serve.max-num-seqs", serve.get("max-num-seqs", 256))
    return tp, dp, _spec_tokens(where, serve), dtype, max_seqs


def _apply_params(roof: Roofline, params: dict[str, float]) -> None:
    for key, value in params.items():
        if key not in FIT_PARAMS:
            raise ConfigError(
                f"sim.{key}: not a simulator parameter (known: {', '.join(FIT_PARAMS)})"
            )
        low, high = FIT_PARAMS[key]
        if not low <= float(value) <= high:  # the bounds a calibration file is held to (nan too)
            raise ConfigError(f"sim.{key}={value}: outside [{low}, {high}]")
        setattr(roof, key, float(value))


def _interval_sigma(cal: Calibration | None, profile: str) -> dict[str, float] | None:
    """The calibration's interval sigmas for this profile (its own, from the parameters'
    gradients on its points), else the calibration's median over the arms it knows."""
    intervals = (cal.data.get("intervals") or {}) if cal else {}
    sigma = (intervals.get("sigma_log_by_profile") or {}).get(profile) or intervals.get("sigma_log")
    return {k: float(v) for k, v in sigma.items()} if sigma else None


def _refuse_like_vllm(
    where: str,
    policy: str,
    pool: int,
    dep: Any,
    args: dict[str, Any],
    max_len: int,
    overridden: bool,
    roof: Roofline,
    window_blocks: int | None,
    unit_bytes: int | None = None,
) -> dict[str, float]:
    """vLLM's start-up checks on the simulated pools (harness.sim.startup): the error names
    the profile, then carries vLLM's own message."""
    try:
        pool_need = kv_pool(policy, pool, dep, args, overridden, window_blocks, unit_bytes)
        facts = check_kv_pool(pool_need, max_len)
        if policy == "hisparse":
            host = int(args["host_blocks"] / roof.host_bytes_scale)
            check_host_pool(host, dep.host_block_tokens, max_len)
    except EngineRefused as exc:
        raise EngineRefused(exc.reason, where) from None
    return facts


def _check_inputs(
    profile: Any,
    serve: dict[str, Any],
    calibration: Calibration | None,
    gpu: str | None,
    where: str,
) -> tuple[ModelSpec, str]:
    for key, value in serve.items():
        if key not in MODELLED and key not in NO_EFFECT:
            raise ConfigError(
                f"{where}: serve.{key}: {value!r}: the simulator does not model this option"
            )
    model = find_model_for(profile.model)
    if model is None:
        raise ConfigError(
            f"{where}: model: {profile.model!r} has no model file in "
            "launch/models (the simulator sizes KV from it)"
        )
    if calibration is not None and gpu is not None and calibration.gpu != gpu:
        raise ConfigError(
            f"{calibration.path}: calibrated for GPU {calibration.gpu!r}, not {gpu!r}; refusing it"
        )
    if calibration is not None and calibration.model != model.name:
        raise ConfigError(
            f"{calibration.path}: calibrated for model {calibration.model!r}, "
            f"the profile serves {model.name!r}; refusing it"
        )
    return model, gpu or (calibration.gpu if calibration else DEFAULT_GPU)


def _roofline(model: ModelSpec, dtype: str, gf: Any, cf: Any, tp: int) -> Roofline:
    arch, bt = model.architecture, model.block_tokens
    layout = model.layout(dtype)  # type: ignore[arg-type]  # dtype was checked against kv_layouts
    return Roofline(
        tp=tp,
        hbm_tbps=gf.hbm_tbps,
        fp8_tflops=gf.fp8_tflops,
        pcie_gbps=gf.pcie_gbps,
        nvlink_gbps=gf.nvlink_gbps,
        allreduce_us=gf.allreduce_us,
        num_layers=arch.num_layers,
        moe_layers=cf.moe_layers,
        indexer_layers=arch.indexer_full_layers,
        hidden_size=cf.hidden_size,
        vocab_size=cf.vocab_size,
        shared_gib=model.weights.shared_gib,
        routed_gib=model.weights.routed_experts_gib,
        ep_shards=tp,
        n_experts=arch.n_routed_experts,
        experts_per_token=cf.experts_per_token,
        expert_params=cf.expert_params,
        active_params=cf.active_params,
        indexer_params=cf.indexer_params,
        row_bytes=layout.host_block_bytes // bt.host,
        indexer_row_bytes=token_bytes(model, dtype)[1] * arch.indexer_full_layers,
        attn_flops_per_row=2.0
        * arch.num_attention_heads
        * (2 * arch.kv_lora_rank + arch.qk_rope_head_dim)
        * arch.num_layers,
        indexer_flops_per_row=2.0
        * arch.index_n_heads
        * arch.index_head_dim
        * arch.indexer_full_layers,
        spec_tokens=0,
    )


def split_overrides(overrides: Sequence[str]) -> tuple[list[str], dict[str, float]]:
    """`--set` strings: serve./sweep. overrides for the profile, and `sim.PARAM=number`
    engine parameters."""
    serve, params = [], {}
    for text in overrides:
        if not text.startswith("sim."):
            serve.append(text)
            continue
        key, sep, value = text.partition("=")
        if not sep:
            raise ConfigError(f"--set {text!r}: expected sim.KEY=VALUE")
        try:
            params[key.removeprefix("sim.")] = float(value)
        except ValueError:
            raise ConfigError(f"--set {text!r}: {value!r} is not a number") from None
    return serve, params
