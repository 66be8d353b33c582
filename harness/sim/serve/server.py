"""Assemble and run the simulated server: profile -> engine (harness.sim.config) -> HTTP."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.sim.config import (
    UNCALIBRATED,
    resolve_calibration,
    setup_from_profile,
    split_overrides,
)
from harness.sim.serve.faults import Faults, FaultState
from harness.sim.startup import EngineRefused
from harness.text import modified_text

SIM_DEFAULT_DATASET = "openhands-offline"  # the blog-shaped offline recipe (tiny tokenizer)
# bench_simserve (loaded 2-core machine): at K=2 interactivity within 5 % of offline at every
# point, occupancy within 8 % except c8 (-15 %); at K=4 c8 occupancy -12..-33 %.
DEFAULT_TIME_SCALE = 2.0
# the start-up line with the server's facts (profile, calibration, intervals, ...) as JSON: the
# run records it (process.py) and every served point's interval comes from it (interval.py)
FACTS_PREFIX = "sim serve: facts "


@dataclass
class ServeOptions:
    profile: str
    overrides: Sequence[str] = ()
    dataset: str | None = None
    tokenizer: str | None = None
    calibration: Path | None = None
    time_scale: float = DEFAULT_TIME_SCALE
    reasoning_field: bool = False
    faults: Faults = field(default_factory=Faults)
    request_log: Path | None = None  # one JSON line per finished request (RequestLog)


def sim_dataset_for(profile_dataset: str) -> str:
    """The offline twin `<recipe>-offline` of a profile's dataset if there is one (the hub
    recipes need GLM-5.3's tokenizer), else the blog-shaped offline recipe."""
    from harness.dataset.recipe import recipe_path

    twin = recipe_path(f"{profile_dataset}-offline")
    return twin.stem if twin is not None else SIM_DEFAULT_DATASET


def tokenizer_for(dataset: str) -> str:
    """The tokenizer a dataset was built with: its recipe's, or a built JSON's manifest."""
    path = Path(dataset).expanduser()
    if path.suffix == ".json":
        sidecar = path.with_name(path.name + ".manifest.json")
        try:
            spec = json.loads(sidecar.read_text(encoding="utf-8"))["tokenizer"]["spec"]
        except (OSError, KeyError, TypeError, json.JSONDecodeError):
            raise ConfigError(
                f"dataset {path}: no manifest {sidecar.name} naming its tokenizer; pass --tokenizer"
            ) from None
        return str(spec)
    from harness.dataset.recipe import load_recipe

    return load_recipe(dataset).tokenizer


def _prewarm(counter: Any, dataset: str) -> None:
    """Encode the dataset's message contents before serving (cached on disk per dataset)."""
    import hashlib
    import time

    from harness.dataset import ensure_dataset
    from harness.paths import cache_dir

    info = ensure_dataset(dataset)
    texts = []
    for conv in json.loads(Path(info.path).read_text(encoding="utf-8"))["conversations"]:
        for turn in conv:
            texts += [m.get("content") or "" for m in turn.get("messages", [])]
    tok_key = hashlib.sha256(counter.tok.sha256.encode()).hexdigest()[:16]
    store = cache_dir() / "sim-serve-tokens" / f"{tok_key}-{str(info.sha256)[:16]}.npz"
    t0 = time.monotonic()
    n = counter.prewarm(texts, store)
    print(
        f"sim serve: {len(texts)} dataset contents ready ({n} encoded, "
        f"{time.monotonic() - t0:.1f} s; store {store})",
        flush=True,
    )


class RequestLog:
    """The server's own record of every finished request, one JSON line each, in virtual
    seconds: what the engine saw, beside what the client measured (e.g. the idle time between
    two turns of a conversation under think time, and the prefix it still held afterwards).

    Keys: ``rid``; ``key`` and ``turn`` (the conversation's first-turn key and the turn, as
    the client's per-request table and the think-time log name them); ``prefix`` (the engine's
    prefix-cache key: requests sharing a first block); ``arrival_s``, ``first_token_s``,
    ``end_s`` on the engine's virtual clock; ``prompt_tokens``; ``cached_tokens`` (prompt
    tokens served from the cache, the number the usage chunk reports); ``output_tokens``.
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()  # an unwritable place fails at start, naming the file
        self.path = path

    def write(self, handle: Any) -> None:
        req = handle.req
        end = req.arrival + (handle.e2e_s or 0.0)
        entry = {
            "rid": req.rid,
            "key": handle.key,
            "turn": handle.turn,
            "prefix": req.conv,
            "arrival_s": req.arrival,
            "first_token_s": req.arrival + handle.ttft_s if handle.ttft_s is not None else None,
            "end_s": end,
            "prompt_tokens": handle.prompt.tokens,
            "cached_tokens": handle.cached_tokens,
            "output_tokens": req.out,
        }
        with open(self.path, "a", encoding="utf-8") as out:  # whole lines, also after a kill
            out.write(json.dumps(entry, separators=(",", ":")) + "\n")


def read_request_log(path: Path) -> list[dict[str, Any]]:
    """A RequestLog's entries, in the order the requests finished."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line]


def build_state(opts: ServeOptions) -> Any:
    from harness.serve.profiles import load_profile
    from harness.sim.serve.app import ServeState, dispatcher
    from harness.sim.serve.live import LiveEngine
    from harness.sim.serve.metrics import SimMetrics
    from harness.sim.serve.tokens import PromptCounter

    if not opts.time_scale > 0:
        raise ConfigError(f"--time-scale {opts.time_scale!r}: must be > 0")
    serve_sets, params = split_overrides(opts.overrides)
    prof = load_profile(opts.profile, serve_sets)
    # As `repro simulate`: the calibration matching the profile's model and GPU unless one (or
    # `none`) is named, so that the HTTP and the offline paths of one workload run one engine.
    cal = resolve_calibration(opts.calibration, prof.model)
    cal_path = cal.path if cal else None
    setup = setup_from_profile(prof, cal, params)
    if opts.reasoning_field and not prof.serve.get("reasoning-parser"):
        raise ConfigError(
            f"--reasoning-field: profile {prof.name} has no reasoning-parser; "
            "vLLM streams delta.reasoning only with one"
        )
    engine = setup.build()
    dataset = opts.dataset or sim_dataset_for(prof.sweep.dataset)
    spec = opts.tokenizer or tokenizer_for(dataset)
    counter = PromptCounter(spec, engine.residency.block_tokens)
    if opts.dataset or not opts.tokenizer:
        _prewarm(counter, dataset)
    emit_box: list[Any] = []  # the dispatcher needs the state, the state needs the engine
    log = RequestLog(opts.request_log) if opts.request_log is not None else None

    def finished(handle: Any) -> None:
        metrics.observe(handle)
        if log is not None:
            log.write(handle)

    live = LiveEngine(
        engine, time_scale=opts.time_scale, emit=lambda ev: emit_box[0](ev), on_finish=finished
    )
    info = {
        "block_size": str(engine.residency.block_tokens),
        "num_gpu_blocks": str(setup.pool_units),
        "enable_prefix_caching": str(setup.prefix_caching),
        "cache_dtype": "fp8",
        "sim_policy": setup.policy,
        "sim_time_scale": str(opts.time_scale),
    }
    metrics = SimMetrics(live, engine.labels, info)
    state = ServeState(
        live=live,
        counter=counter,
        metrics=metrics,
        model=setup.served_model_name,
        max_model_len=setup.max_model_len,
        reasoning_field=opts.reasoning_field,
        faults=FaultState(opts.faults),
        pool=ThreadPoolExecutor(max_workers=2, thread_name_prefix="tokenize"),
    )
    emit_box.append(dispatcher(state))
    state.facts = {
        "profile": prof.name,
        "policy": setup.policy,
        "tokenizer": spec,
        "calibration": str(cal_path) if cal_path else None,
        "modified": dict(params) if cal_path else {},  # moved off the fit: no interval
        # log-space sigma per metric: each served point's 80 % interval (sim/serve/interval.py)
        "interval_sigma": setup.interval_sigma,
        "time_scale": opts.time_scale,
        "params": setup.roofline.fitted(),
        "setup": setup.facts,
    }
    return state


def facts_line(facts: dict[str, Any]) -> str:
    return f"{FACTS_PREFIX}{json.dumps(facts, default=str)}"


def read_facts(log_text: Iterable[str]) -> dict[str, Any]:
    """The facts a simulated server logged at start-up (its first facts line), or {}."""
    for line in log_text:
        if line.startswith(FACTS_PREFIX):
            try:
                facts = json.loads(line.removeprefix(FACTS_PREFIX))
            except ValueError:  # a line cut short (a full disk): as if never logged
                return {}
            return facts if isinstance(facts, dict) else {}
    return {}


def serve(opts: ServeOptions, *, host: str, port: int, echo: Any = print) -> None:
    """Run until SIGINT/SIGTERM (aiohttp's run_app handles both)."""
    from aiohttp import web

    from harness.sim.serve.app import make_app

    _check_bindable(host, port)  # before the dataset is encoded (minutes on a cold cache)
    try:
        state = build_state(opts)
    except EngineRefused as exc:
        # vLLM's engine core logs its ValueError and the server exits 1; the run layer reads
        # the reason from this line (harness.serve.startup)
        print(f"ValueError: {exc.reason}", file=sys.stderr, flush=True)
        raise
    facts = state.facts
    echo(
        f"sim serve: profile {facts['profile']} ({facts['policy']}), time scale "
        f"{opts.time_scale:g}, tokenizer {facts['tokenizer']}, calibration "
        f"{facts['calibration'] or UNCALIBRATED}{modified_text(facts.get('modified'))}"
    )
    echo(facts_line(facts))
    web.run_app(
        make_app(state), host=host, port=port, print=echo, access_log=None, shutdown_timeout=2.0
    )


def _check_bindable(host: str, port: int) -> None:
    """A host that does not resolve or a port that is taken fails at once (OSError)."""
    import socket

    for family, kind, proto, _name, address in socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM
    ):
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                reason = (exc.strerror or str(exc)).lower()
                raise OSError(exc.errno, f"cannot bind {address!r}: {reason}") from None
        return
