"""Command-line values -> a PlanRequest, or a ConfigError naming the option and the reason."""

from __future__ import annotations

from pathlib import Path

from harness.analysis.slo import parse_slo
from harness.capacity.deployment import make_deployment
from harness.capacity.model import ModelSpec, load_model, model_files
from harness.errors import ConfigError
from harness.plan.arms import ARMS, Config, base_serve
from harness.plan.inputs import (
    DEFAULT_ARMS,
    DEFAULT_CONCURRENCY,
    DEFAULT_MAX_NUM_SEQS,
    DEFAULT_POOLS_GIB,
    GPUS,
    PlanRequest,
    TrafficShape,
    check_grid,
    check_think_time,
    check_traffic,
    parse_list,
    parse_think_time,
    served_max_model_len,
)
from harness.sim.config import (
    NO_CALIBRATION,
    find_calibration,
    load_calibration,
)


def build_request(
    *,
    model: str = "glm-5.3",
    gpu: str = "h200",
    tp: int | None = None,
    traffic: TrafficShape | None = None,
    think_time: str | None = None,
    slo: str | None = None,
    min_attainment: float = 0.9,
    arms: str | None = None,
    pools: str | None = None,
    max_num_seqs: str | None = None,
    concurrency: str | None = None,
    calibration: str | None = None,
    top: int = 10,
    base_dir: Path | None = None,
) -> PlanRequest:
    spec = _model(model)
    gpu = _gpu(gpu)
    arm_names = parse_list(arms, "--arms", str) if arms else DEFAULT_ARMS
    pool_list = parse_list(pools, "--host-pool-gib", float) if pools else DEFAULT_POOLS_GIB
    mns = parse_list(max_num_seqs, "--max-num-seqs", int) if max_num_seqs else DEFAULT_MAX_NUM_SEQS
    conc = parse_list(concurrency, "--concurrency", int) if concurrency else DEFAULT_CONCURRENCY
    check_grid(arm_names, pool_list, mns, conc)
    profile_tp = {int(base_serve(ARMS[a].profile)["tensor-parallel-size"]) for a in arm_names}
    tp = _tp(spec, gpu, tp if tp is not None else max(profile_tp))
    max_len = served_max_model_len(arm_names)
    shape = traffic or TrafficShape()
    check_traffic(shape, max_len)
    think = parse_think_time(think_time, base_dir)
    shape = TrafficShape(shape.turns, shape.context, shape.turn_tokens, shape.output_tokens, think)
    check_think_time(think, shape, conc)
    if slo is None:
        raise ConfigError("--slo: required (goodput counts requests meeting it, e.g. tpot=70ms)")
    objectives = parse_slo(slo, source="--slo")
    if not 0 < min_attainment <= 1:
        raise ConfigError(f"--min-attainment {min_attainment}: must be in (0, 1]")
    if top < 1:
        raise ConfigError(f"--top {top}: must be >= 1")
    cal, notes = _calibration(calibration, spec.name, gpu, tp, profile_tp)
    request = PlanRequest(
        model=spec.name,
        model_id=spec.hub_ids[0] if spec.hub_ids else spec.name,
        gpu=gpu,
        tp=tp,
        traffic=shape,
        objectives=objectives,
        min_attainment=min_attainment,
        arms=arm_names,
        pools_gib=pool_list,
        max_num_seqs=mns,
        concurrency=conc,
        calibration=cal,
        top=top,
        max_model_len=max_len,
        notes=tuple(notes),
    )
    _check_simulator(request)
    return request


def _model(name: str) -> ModelSpec:
    files = model_files()
    if name not in files:
        raise ConfigError(
            f"--model {name!r}: no model file launch/models/{name}.yaml (known: {', '.join(files)})"
        )
    return load_model(name)


def _gpu(name: str) -> str:
    lowered = str(name).lower()
    if lowered not in GPUS:
        raise ConfigError(f"--gpu {name!r}: unknown GPU (known: {', '.join(GPUS)})")
    return lowered


def _tp(spec: ModelSpec, gpu: str, tp: int) -> int:
    if tp not in spec.parallelism.tp_sizes:
        sizes = ", ".join(map(str, spec.parallelism.tp_sizes))
        raise ConfigError(f"--tp {tp}: {spec.display_name} is modelled at TP {sizes}")
    try:
        make_deployment(spec, gpu=gpu, tp=tp)
    except ConfigError as exc:
        raise ConfigError(f"--tp {tp} --gpu {gpu}: {exc}") from None
    return tp


def _calibration(
    given: str | None, model: str, gpu: str, tp: int, profile_tp: set[int]
) -> tuple[Path | None, list[str]]:
    if given is not None and given == NO_CALIBRATION and not Path(given).is_file():
        return None, ["uncalibrated: the roofline defaults, no prediction intervals"]
    if given is not None:
        path = Path(given)
        cal = load_calibration(path)  # missing, unreadable, bad schema: one line naming it
        for what, fitted, asked in (("model", cal.model, model), ("GPU", cal.gpu, gpu)):
            if fitted != asked:
                raise ConfigError(
                    f"--calibration {path}: fitted for {what} {fitted!r}, not {asked!r}"
                )
    else:
        found = find_calibration(model, gpu)
        if found is None:
            raise ConfigError(
                f"--calibration: no calibration fitted for {model} on {gpu} in "
                "launch/calibrations/; the step cost would be the uncalibrated roofline: give "
                "--calibration none to plan with it anyway (no prediction intervals)"
            )
        path = found
    if tp not in profile_tp:
        raise ConfigError(
            f"--tp {tp}: {path.name} was fitted on the blog's TP{max(profile_tp)} servers "
            "(its KV budget and step efficiencies are theirs); give --calibration none to plan "
            "another TP with the roofline defaults"
        )
    return path, []


def _check_simulator(request: PlanRequest) -> None:
    """Set up each arm's engine once: a model, GPU or option the simulator cannot model is
    refused here with its reason. A pool the engine refuses to start with stays a
    configuration of the grid (recorded as refused, like vLLM's own start-up error)."""
    from harness.plan.evaluate import simulator_setup
    from harness.sim.startup import EngineRefused

    for name in request.arms:
        config = Config(name, max(request.pools_gib), max(request.max_num_seqs), 1)
        try:
            simulator_setup(request, config, (1,))
        except EngineRefused:
            continue
        except ConfigError as exc:
            raise ConfigError(
                f"--model {request.model} --gpu {request.gpu}: the simulator cannot model "
                f"arm {name}: {exc}"
            ) from None
