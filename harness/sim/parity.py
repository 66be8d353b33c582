"""Parity with a real vLLM CPU server: fit the step cost on one unpressured real run, then
predict other (pressured) real runs with the same scheduler model (issue 12 item 5).

The CPU build runs vLLM 0.32.0's own v1 scheduler, so with a step cost measured on the same
machine the simulator must reproduce what memory pressure does to it: occupancy (the mean
nonzero `num_requests_running`), waiting and preemptions. Everything the prediction uses comes
from the runs' manifests (profile `serve:` and `sweep:` blocks), the dataset manifest's
templated per-turn token counts (the server's prompt tokens include the chat template) and the
fit; the pressured run's measurements are only compared against, never used.

The cost model (`CpuCost`) has four physically meaningful parameters, all from the base run's
/metrics deltas and EvalScope timings:
* `step_s` + `per_seq_s x decoding requests`: the step time of a decode batch (server TPOT at c1
  and at the base run's highest point);
* `per_prefill_token_s`: prefill tokens (c1: prefill time minus one decode step, per new token);
* `overhead_s`: time a request spends in flight at the client but outside the engine's queues
  (HTTP, chat template, tokenising, detokenising, EvalScope's turn hand-off): the client's mean
  latency minus the server's queue + inference time. This is why the gauge reads below the
  client's in-flight count without pressure (docs/pitfalls.md).
"""

from __future__ import annotations

import heapq
import json
import math
import random
from dataclasses import asdict, dataclass, replace
from itertools import pairwise
from pathlib import Path
from typing import Any

from harness import metric_names as mn
from harness.analysis.metrics import counter_delta
from harness.client.scrape import read_samples_csv
from harness.errors import ConfigError, RunError
from harness.results import PointRecord, Run, RunLayout, load_run
from harness.serve.sched_trace import TRACING_SCHEDULER
from harness.serve.tiny.models import model_spec
from harness.sim.client import Workload
from harness.sim.cost import StepStats
from harness.sim.engine import Engine
from harness.sim.mtp import Mtp
from harness.sim.parity_spread import draw_delay, overhead_spread_s
from harness.sim.parity_stalls import StallWindows
from harness.sim.request import Request
from harness.sim.residency import GpuResidency, Hit
from harness.sim.scheduler import Scheduler

# vLLM 0.32.0 on CPU (engine/arg_utils.py, the OpenAI server's CPU defaults; platforms/cpu.py
# turns async scheduling off, so one schedule() per executed step, as the simulator does).
CPU_MAX_NUM_BATCHED_TOKENS = 2048
CPU_MAX_NUM_SEQS = 128
CPU_BLOCK_TOKENS = 128  # the CPU attention backend's KV block size (docs/vllm-cpu.md §4)
GIB = 2**30

# Serve keys of a CPU profile: modelled, or without effect on scheduling.
CPU_MODELLED = {
    "max-model-len",
    "num-gpu-blocks-override",
    "max-num-seqs",
    "max-num-batched-tokens",
    "enable-prefix-caching",
}
CPU_NO_EFFECT = {"served-model-name", "dtype", "enable-prompt-tokens-details"}


# --------------------------------------------------------------------------- the server


@dataclass(frozen=True)
class CpuServe:
    """What the CPU server schedules with, from a profile's `serve:` block and env."""

    blocks: int
    block_tokens: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    prefix_caching: bool

    @property
    def usable_blocks(self) -> int:
        """vLLM's BlockPool keeps block 0 as the null block: N configured, N - 1 allocatable
        (block_pool.py; `kv_cache_usage_perc` divides by N - 1 too)."""
        return self.blocks - 1

    def static_limit(self, seq_len: int) -> int:
        """The capacity model's baseline limit (harness.capacity.formulas.capacity_at):
        requests of `seq_len` tokens whose blocks fit the pool at once, capped by max-num-seqs."""
        per_request = math.ceil(seq_len / self.block_tokens)
        return min(self.max_num_seqs, self.usable_blocks // per_request)


def _pos_int(where: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: serve.{key}: {value!r} must be an integer >= 1")
    return value


def cpu_serve(profile: dict[str, Any]) -> CpuServe:
    """The CPU server's scheduling limits from a run manifest's profile dump.

    Without `num-gpu-blocks-override` the pool is `VLLM_CPU_KVCACHE_SPACE` GiB over the model's
    KV bytes per token.
    """
    where = f"profile {profile.get('name')!r}"
    kv_bytes_per_token = tiny_kv_bytes_per_token(str(profile.get("model")))
    serve = dict(profile.get("serve") or {})
    for key, value in serve.items():
        if key == "scheduler-cls" and value == TRACING_SCHEDULER:
            continue  # vLLM's own scheduler, its decisions recorded (harness/serve/sched_trace.py)
        if key not in CPU_MODELLED and key not in CPU_NO_EFFECT:
            raise ConfigError(
                f"{where}: serve.{key}: {value!r}: the CPU parity model does not model this option"
            )
    max_len = _pos_int(where, "max-model-len", serve.get("max-model-len", 4096))
    if "num-gpu-blocks-override" in serve:
        blocks = _pos_int(where, "num-gpu-blocks-override", serve["num-gpu-blocks-override"])
    else:
        space = (profile.get("env") or {}).get("VLLM_CPU_KVCACHE_SPACE")
        if space is None:
            raise ConfigError(
                f"{where}: serve.num-gpu-blocks-override: absent, and the pool cannot be sized "
                "without env.VLLM_CPU_KVCACHE_SPACE"
            )
        blocks = int(float(space)) * GIB // (kv_bytes_per_token * CPU_BLOCK_TOKENS)
    if (blocks - 1) * CPU_BLOCK_TOKENS < max_len:
        # vLLM refuses to start then (docs/pitfalls.md): a run with it cannot exist.
        raise ConfigError(
            f"{where}: serve.num-gpu-blocks-override: {blocks} blocks x {CPU_BLOCK_TOKENS} "
            f"cannot hold max-model-len {max_len}"
        )
    return CpuServe(
        blocks=blocks,
        block_tokens=CPU_BLOCK_TOKENS,
        max_num_seqs=_pos_int(where, "max-num-seqs", serve.get("max-num-seqs", CPU_MAX_NUM_SEQS)),
        max_num_batched_tokens=_pos_int(
            where,
            "max-num-batched-tokens",
            serve.get("max-num-batched-tokens", CPU_MAX_NUM_BATCHED_TOKENS),
        ),
        max_model_len=max_len,
        prefix_caching=bool(serve.get("enable-prefix-caching", True)),
    )


def tiny_kv_bytes_per_token(model: str) -> int:
    """K and V of every layer in bf16 for a dense tiny model (`tiny:NAME`, harness.serve.tiny).

    MLA models are refused: on CPU they run without prefix caching or chunked prefill and with
    16-token blocks (docs/vllm-cpu.md §7.6), which this parity model does not cover.
    """
    name = model.removeprefix("tiny:")
    if not model.startswith("tiny:"):
        raise ConfigError(f"model: {model!r}: CPU parity covers the tiny:NAME models only")
    params = model_spec(name)["params"]
    if "kv_lora_rank" in params:
        raise ConfigError(f"model: {model!r}: an MLA model; CPU parity covers dense models only")
    return 2 * params["num_hidden_layers"] * params["num_key_value_heads"] * params["head_dim"] * 2


# --------------------------------------------------------------------------- the workload


def manifest_workload(manifest_path: Path) -> Workload:
    """Per-turn token counts as the server sees them: the dataset manifest's templated prompt
    lengths, with the builder's assumed reply replaced by the sweep's fixed `max_tokens`.

    Turn t's templated prompt = turn t-1's + assumed reply + the new user turn with its template
    tokens; the simulator adds the real reply itself, so a turn's new tokens are the templated
    growth minus the assumed reply.
    """
    try:
        data = json.loads(Path(manifest_path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{manifest_path}: dataset manifest not found") from None
    assumed = (data.get("totals") or {}).get("assistant_reply_tokens_assumed")
    if not isinstance(assumed, int) or assumed < 0:
        raise ConfigError(
            f"{manifest_path}: totals.assistant_reply_tokens_assumed: {assumed!r} (needed to "
            "take the assumed reply out of the templated counts)"
        )
    convs = []
    for conv in data.get("conversations") or []:
        templated = [t.get("templated_prompt_tokens") for t in conv.get("turns") or []]
        if not templated or not all(isinstance(x, int) and x > 0 for x in templated):
            raise ConfigError(
                f"{manifest_path}: conversations[{conv.get('index')}].turns: "
                f"templated_prompt_tokens {templated!r} must be positive integers"
            )
        turns = [templated[0]]
        turns += [b - a - assumed for a, b in pairwise(templated)]
        if min(turns) < 1:
            raise ConfigError(f"{manifest_path}: conversation {conv.get('index')}: turns {turns}")
        convs.append(tuple(turns))
    if not convs:
        raise ConfigError(f"{manifest_path}: no conversations")
    return Workload(tuple(convs), f"{manifest_path} (templated)")


def recorded_workload(run: Run) -> Workload:
    """The simulator's workload of a recorded run: its dataset's conversations, as token counts."""
    path = Path(run.manifest.dataset.get("path", "")).with_suffix(".json.manifest.json")
    return manifest_workload(path)


# --------------------------------------------------------------------------- the cost


@dataclass(frozen=True)
class CpuCost:
    """Step time of the tiny model on this CPU, and the time a request spends outside it."""

    step_s: float
    per_seq_s: float
    per_prefill_token_s: float
    overhead_s: float  # at c1
    overhead_per_parallel_s: float = 0.0  # more per extra client worker (one API server)
    resent_reply_tokens: float = 0.0  # a reply re-sent in the next turn is this much longer
    source: str = ""
    overhead_sd_s: float = 0.0  # timing noise, drawn only by a seeded replay (parity_spread)

    def overhead_at(self, parallel: int) -> float:
        return self.overhead_s + self.overhead_per_parallel_s * max(parallel - 1, 0)

    def step_time(self, s: StepStats) -> float:
        return (
            self.step_s
            + self.per_seq_s * s.decode_reqs
            + self.per_prefill_token_s * s.prefill_tokens
        )

    def pcie_bytes_per_s(self) -> float:
        return 1.0  # no host pool on the CPU profiles


@dataclass(frozen=True)
class PointDeltas:
    """One real point's server counters over its window, plus EvalScope's timings."""

    label: str
    parallel: int
    requests: float
    generation_tokens: float
    prompt_tokens: float
    cached_tokens: float
    decode_s: float
    prefill_s: float
    queue_s: float
    inference_s: float
    client_latency_s: float
    occupancy: float | None

    @property
    def tpot_s(self) -> float:
        return self.decode_s / max(self.generation_tokens - self.requests, 1.0)

    @property
    def new_prompt_tokens(self) -> float:
        return (self.prompt_tokens - self.cached_tokens) / self.requests

    @property
    def overhead_s(self) -> float:
        return self.client_latency_s - (self.queue_s + self.inference_s) / self.requests


def point_deltas(run: Run, point: PointRecord) -> PointDeltas:
    samples = read_samples_csv(RunLayout(run.root).samples_csv(point.point_id))

    def delta(name: str) -> float:
        value, _ = counter_delta(samples, name)
        if value is None:
            raise RunError(f"{run.root}: point {point.point_id}: no {name} samples")
        return value

    client = point.client
    if client is None or client.mean_latency_s is None:
        raise RunError(f"{run.root}: point {point.point_id}: no client latency")
    requests = delta(mn.total(mn.REQUEST_SUCCESS))
    if requests <= 0:
        raise RunError(f"{run.root}: point {point.point_id}: no finished requests in the window")
    return PointDeltas(
        label=point.label,
        parallel=point.parallel,
        requests=requests,
        generation_tokens=delta(mn.total(mn.GENERATION_TOKENS)),
        prompt_tokens=delta(mn.total(mn.PROMPT_TOKENS)),
        cached_tokens=delta(mn.total(mn.PREFIX_CACHE_HITS)),
        decode_s=delta(mn.hist_sum(mn.REQUEST_DECODE_TIME_SECONDS)),
        prefill_s=delta(mn.hist_sum(mn.REQUEST_PREFILL_TIME_SECONDS)),
        queue_s=delta(mn.hist_sum(mn.REQUEST_QUEUE_TIME_SECONDS)),
        inference_s=delta(mn.hist_sum(mn.REQUEST_INFERENCE_TIME_SECONDS)),
        client_latency_s=client.mean_latency_s,
        # The batch size for the fit: the client's time-weighted in-flight mean (exact request
        # times), not the gauge: a short unpressured point has only a few 1 s scrapes
        # (docs/pitfalls.md; a 3 s c4 point read 1.0). The gauge's mean is the fallback without client timings.
        occupancy=point.metrics.get("client_in_flight_mean") or point.metrics.get("occupancy"),
    )


def fit_cpu_cost(run_dir: Path | str) -> tuple[CpuCost, list[PointDeltas]]:
    """Fit `CpuCost` on an unpressured real run with a c1 point and at least one more point."""
    run = load_run(run_dir)
    if run.manifest.simulated:
        raise RunError(f"{run.root}: a simulated run; fit on a real one")
    if any(p.metrics.get("preemptions") for p in run.valid_points()):
        raise RunError(f"{run.root}: the fit run has preemptions; fit on an unpressured run")
    points = [point_deltas(run, p) for p in run.valid_points()]
    try:
        cost = cost_from_deltas(points, _resent_reply_excess(run, points), str(run.root))
    except ValueError as exc:
        raise RunError(f"{run.root}: {exc}") from None
    return replace(cost, overhead_sd_s=overhead_spread_s(run)), points


def cost_from_deltas(points: list[PointDeltas], resent: float, source: str) -> CpuCost:
    """c1 gives one decode step (a + b) and one prefill (a + b + c x new tokens); the highest
    point's TPOT at its batch size (the client in-flight mean) splits a from b, net of the
    prefill tokens that share its steps (each step emits one token per running request). The
    out-of-engine time is a line in the client's parallelism (one API server process serves
    every stream)."""
    ones = [p for p in points if p.parallel == 1]
    many = [p for p in points if p.parallel > 1 and p.occupancy]
    if not ones or not many:
        raise ValueError(
            "need a valid c1 point and a valid point above c1 with an occupancy or a client "
            "in-flight mean "
            f"(have {[p.label for p in points]})"
        )
    one, top = ones[0], max(many, key=lambda p: p.parallel)
    decode1 = one.tpot_s
    prefill1 = one.prefill_s / one.requests
    c = max(0.0, (prefill1 - decode1) / max(one.new_prompt_tokens, 1.0))
    occ = float(top.occupancy or 1.0)
    per_step_prefill = (top.prompt_tokens - top.cached_tokens) * occ / top.generation_tokens
    b = (top.tpot_s - decode1 - c * per_step_prefill) / max(occ - 1.0, 1e-9)
    b = min(max(b, 0.0), decode1)
    o0, o1 = _line([(float(p.parallel), max(p.overhead_s, 0.0)) for p in points])
    return CpuCost(decode1 - b, b, c, max(o0 + o1, 0.0), max(o1, 0.0), resent, source=source)


def _line(xy: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares intercept and slope (slope 0 with a single x)."""
    n = len(xy)
    mx = sum(x for x, _ in xy) / n
    my = sum(y for _, y in xy) / n
    sxx = sum((x - mx) ** 2 for x, _ in xy)
    if sxx == 0:
        return my, 0.0
    slope = sum((x - mx) * (y - my) for x, y in xy) / sxx
    return my - slope * mx, slope


def _resent_reply_excess(run: Run, points: list[PointDeltas]) -> float:
    """Tokens per earlier turn by which the server's prompts exceed the templated counts with a
    `max_tokens` reply: a reply is detokenised and re-tokenised with its template before it is
    re-sent, which need not give back `max_tokens` tokens."""
    wl = recorded_workload(run)
    reply = int(run.manifest.sweep["max_tokens"])
    turns = wl.num_turns
    modelled = sum(sum(u[:t]) + (t - 1) * reply for u in wl.turns for t in range(1, turns + 1)) / (
        len(wl.turns) * turns
    )
    measured = sum(p.prompt_tokens for p in points) / sum(p.requests for p in points)
    earlier = (turns - 1) / 2  # mean number of earlier turns per request
    return (measured - modelled) / earlier if earlier else 0.0


# --------------------------------------------------------------------------- the engine


class ResentResidency(GpuResidency):
    """GPU-only caching where the next turn can hit only the previous turn's prompt blocks.

    The next turn re-sends the reply as text, re-tokenised with its template; for the tiny
    random-weight models that rarely gives back the generated tokens, so the prefix hit ends
    with the previous prompt (the base run's hits are exactly its previous prompts' full
    blocks). vLLM still keeps every full block of the finished turn, its reply's included, in
    the prefix cache (hashed when filled), where they wait in LRU order with the rest and are
    evicted tail first, after every never-cached block (vLLM 0.32.0 `v1/core/block_pool.py`
    free_blocks: blocks without a hash go to the free queue's front, hashed ones to its end);
    the scheduler trace showed the difference (docs/simulator.md §6c, *Scheduler trace*). A
    preempted request keeps its output blocks hittable: it resumes with the same tokens.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hittable: dict[int, int] = {}  # conv -> blocks its next turn can hit
        # rid -> blocks of its prompt equal to its conversation's last cached run, where the
        # caller knows the tokens (a scheduler trace's block hashes: the re-tokenised reply
        # can keep its first tokens, and a block of them then hits too); it replaces
        # `hittable` for that request's first admission.
        self.matched: dict[int, int] = {}

    def release(self, req: Request) -> None:
        if req.done:
            self.hittable[req.conv] = min(req.computed, req.prompt) // self.block_tokens
        else:
            self.hittable.pop(req.conv, None)
        self.matched.pop(req.rid, None)  # resumed after a preemption: its own blocks hit
        super().release(req)

    def lookup(self, req: Request) -> Hit:
        hit = super().lookup(req)
        cap = self.matched.get(req.rid, self.hittable.get(req.conv))
        if cap is None or hit.gpu_blocks <= cap:
            return hit
        return replace(hit, gpu_blocks=cap)


@dataclass
class RequestTimes:
    """Sums of vLLM's per-request time histograms (v1/metrics/stats.py): queue = first
    scheduled - queued, prefill = first token - first scheduled, decode = last token - first
    token, inference = prefill + decode; and the output tokens after the first."""

    requests: int = 0
    queue_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    decode_tokens: int = 0

    def minus(self, other: RequestTimes) -> RequestTimes:
        return RequestTimes(
            self.requests - other.requests,
            self.queue_s - other.queue_s,
            self.prefill_s - other.prefill_s,
            self.decode_s - other.decode_s,
            self.decode_tokens - other.decode_tokens,
        )


@dataclass
class GaugeTime:
    """The running gauge integrated over time: what a scraper with a random phase sees on
    average (lockstep turns alias with a fixed scrape period: docs/pitfalls.md)."""

    running_s: float = 0.0  # integral of num_requests_running
    busy_s: float = 0.0  # time with num_requests_running > 0

    def minus(self, other: GaugeTime) -> GaugeTime:
        return GaugeTime(self.running_s - other.running_s, self.busy_s - other.busy_s)

    @property
    def nonzero_mean(self) -> float | None:
        return self.running_s / self.busy_s if self.busy_s > 0 else None


class StatsScheduler(Scheduler):
    """The scheduler with vLLM's stats timing: `make_stats()` runs at the end of
    `update_from_output()` (scheduler.py), after the step's finished requests left and before
    the next `schedule()` admits anyone, and the gauges hold that snapshot until the next step
    ends. A request admitted into a step is counted running only once that step is done
    (docs/pitfalls.md: on slow prefill the gauge lags the requests in flight). Finished
    requests add to `times` as vLLM's histograms do (a preempted request keeps its first
    scheduled time)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.snapshot: tuple[int, int, int] = (0, 0, 0)  # running, waiting, used units
        self.clock = 0.0  # the engine's time when it hands over new requests (`add`)
        self.times = RequestTimes()
        self.gauge = GaugeTime()
        self._held_since = 0.0
        self._queued: dict[int, float] = {}

    def add(self, req: Request) -> None:
        self._queued.setdefault(req.rid, self.clock)
        super().add(req)

    def hold(self, until: float) -> None:
        """Integrate the gauge's current reading up to `until` (it holds between steps)."""
        dt, running = until - self._held_since, self.snapshot[0]
        if dt > 0:
            self.gauge.running_s += running * dt
            self.gauge.busy_s += dt if running > 0 else 0.0
            self._held_since = until

    def update(self, batch: list[Any], end: float) -> list[Request]:
        finished = super().update(batch, end)
        self.hold(end)
        self.snapshot = (len(self.running), len(self.waiting), self.residency.pool.used)
        t = self.times
        for req in finished:
            queued = self._queued.pop(req.rid)
            scheduled = req.scheduled_at if req.scheduled_at is not None else end
            first = req.first_token_at if req.first_token_at is not None else end
            t.requests += 1
            t.queue_s += scheduled - queued
            t.prefill_s += first - scheduled
            t.decode_s += end - first
            t.decode_tokens += req.out - 1
        return finished


class CpuEngine(Engine):
    """The simulated CPU server: the engine enters a request `overhead_s` after the client
    sent it (all out-of-engine time is put before the engine; occupancy cannot tell), and the
    gauges read the last step's stats snapshot (`StatsScheduler`)."""

    overhead_s = 0.0  # set per point (it grows with the client's parallelism)
    overhead_sd_s = 0.0  # with `rng`: each request's out-of-engine time drawn (parity_spread)
    rng: random.Random | None = None
    # with `rng`: the point's shared pauses (parity_stalls); a request sent in one is sent at
    # its end, and its drawn out-of-engine time is shorter by the mean wait so the mean holds
    stalls: StallWindows | None = None
    stall_mean_wait_s = 0.0

    def receive(self, req: Request) -> None:
        delay, sent = self.overhead_s, req.arrival
        if self.rng is not None:
            if self.stalls is not None:
                sent = self.stalls.release(req.arrival)
            mean = max(0.0, self.overhead_s - self.stall_mean_wait_s)
            delay = draw_delay(self.rng, mean, self.overhead_sd_s)
        heapq.heappush(self.pending, (sent + delay, req.rid, req))

    def admit_ready(self) -> None:
        if isinstance(self.scheduler, StatsScheduler):
            self.scheduler.clock = self.now  # requests join the queue between steps
        super().admit_ready()

    def counters(self) -> dict[str, float]:
        """The engine's counters plus vLLM's request-time histogram sums and counts."""
        out = super().counters()
        sched = self.scheduler
        if isinstance(sched, StatsScheduler):
            t = sched.times
            sums = {
                mn.REQUEST_QUEUE_TIME_SECONDS: t.queue_s,
                mn.REQUEST_PREFILL_TIME_SECONDS: t.prefill_s,
                mn.REQUEST_DECODE_TIME_SECONDS: t.decode_s,
                mn.REQUEST_INFERENCE_TIME_SECONDS: t.prefill_s + t.decode_s,
            }
            for name, value in sums.items():
                out[mn.hist_sum(name)] = value
                out[mn.hist_count(name)] = float(t.requests)
        return out

    def gauges(self) -> dict[str, float]:
        sched = self.scheduler
        if not isinstance(sched, StatsScheduler):
            return super().gauges()
        running, waiting, used = sched.snapshot
        return {
            mn.NUM_REQUESTS_RUNNING: float(running),
            mn.NUM_REQUESTS_WAITING: float(waiting),
            mn.KV_CACHE_USAGE_PERC: used / self.residency.pool.capacity,
        }


@dataclass(frozen=True)
class CpuSetup:
    """What `harness.sim.run.simulate_points` needs: `build()` and `max_model_len`."""

    serve: CpuServe
    cost: CpuCost
    served_model_name: str = "tiny"

    @property
    def max_model_len(self) -> int:
        return self.serve.max_model_len

    def build(self) -> Engine:
        s = self.serve
        residency = ResentResidency(s.usable_blocks, s.block_tokens, s.prefix_caching)
        sched = StatsScheduler(
            residency,
            max_num_seqs=s.max_num_seqs,
            max_num_batched_tokens=s.max_num_batched_tokens,
            mtp=Mtp(0, 1.0),
        )
        labels = {"engine": "0", "model_name": self.served_model_name}
        return CpuEngine(sched, self.cost, topk=1, labels=labels, row_bytes=0)

    def facts(self) -> dict[str, Any]:
        return {
            "device": "cpu",
            "policy": "gpu",
            "num_gpu_blocks": self.serve.blocks,
            "pool_units": self.serve.usable_blocks,
            "block_tokens": self.serve.block_tokens,
            "max_num_seqs": self.serve.max_num_seqs,
            "max_num_batched_tokens": self.serve.max_num_batched_tokens,
            "cost": asdict(self.cost),
        }
