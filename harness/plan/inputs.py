"""What `repro plan` is asked, validated strictly before anything is simulated.

Every refusal is a ConfigError whose message starts with the option at fault and says why the
simulator cannot model the request (docs/plan.md §1).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from harness.analysis.slo import Objectives
from harness.config import describe_error
from harness.dataset.thinktime import NO_THINK_TIME, PauseTable, ThinkTime
from harness.errors import ConfigError
from harness.plan.arms import ARMS, Config, arm, base_serve

GPUS = ("h200", "b200", "b300")
BLOG_TURNS, BLOG_CONTEXT, BLOG_TURN_TOKENS, BLOG_OUTPUT = 13, 74160, 753, 220  # docs/recipe.md §2
DEFAULT_ARMS = ("hisparse", "offload")
DEFAULT_POOLS_GIB = (128.0, 256.0, 384.0, 512.0)
DEFAULT_MAX_NUM_SEQS = (4, 8, 16, 24, 256)
DEFAULT_CONCURRENCY = (1, 8, 16, 24, 32)  # the blog's points
MAX_CONCURRENCY = 1024
MAX_GRID = 5000


@dataclass(frozen=True)
class TrafficShape:
    """The traffic a candidate configuration must serve (the planner's input): the blog's
    shape, parameterised: turn 1 is `context` tokens, each later turn adds
    `turn_tokens` user tokens and the previous `output_tokens` reply (docs/recipe.md §6.8)."""

    turns: int = BLOG_TURNS
    context: int = BLOG_CONTEXT
    turn_tokens: int = BLOG_TURN_TOKENS
    output_tokens: int = BLOG_OUTPUT
    think: ThinkTime = NO_THINK_TIME

    @property
    def longest(self) -> int:
        """Tokens of the last turn's prompt plus its reply: the longest sequence served."""
        return (
            self.context
            + (self.turns - 1) * (self.turn_tokens + self.output_tokens)
            + (self.output_tokens)
        )

    def conversations(self, concurrency: int) -> int:
        """Conversations per point: two per worker, at least four (the blog's 4 16 32 48 64
        for c1 8 16 24 32, docs/recipe.md §3)."""
        return max(4, 2 * concurrency)

    def to_json(self) -> dict[str, Any]:
        return {
            "turns": self.turns,
            "context": self.context,
            "turn_tokens": self.turn_tokens,
            "output_tokens": self.output_tokens,
            "longest_tokens": self.longest,
            "think_time": self.think.model_dump(mode="json"),
        }


@dataclass(frozen=True)
class PlanRequest:
    model: str  # launch/models name
    model_id: str  # the hub id a profile serves
    gpu: str
    tp: int
    traffic: TrafficShape
    objectives: Objectives
    min_attainment: float
    arms: tuple[str, ...]
    pools_gib: tuple[float, ...]
    max_num_seqs: tuple[int, ...]
    concurrency: tuple[int, ...]
    calibration: Path | None  # None: the roofline defaults (asked for with --calibration none)
    top: int = 10
    max_model_len: int = 142000
    notes: tuple[str, ...] = field(default=())

    def grid(self) -> list[Config]:
        return [
            Config(a, p, m, c)
            for a, p, m, c in itertools.product(
                self.arms, self.pools_gib, self.max_num_seqs, self.concurrency
            )
        ]

    @property
    def gpus(self) -> int:
        return self.tp  # DP1: the simulator models one replica (docs/simulator.md §3)


def parse_list(text: str, option: str, kind: type) -> tuple[Any, ...]:
    """`8,16,32` -> (8, 16, 32); duplicates, empty items and non-numbers refused."""
    items = [part.strip() for part in str(text).split(",")]
    if not items or any(not part for part in items):
        raise ConfigError(f"{option} {text!r}: a comma-separated list without empty items")
    values = []
    for part in items:
        try:
            value = kind(part)
        except ValueError:
            raise ConfigError(f"{option} {text!r}: {part!r} is not a {kind.__name__}") from None
        if not isinstance(value, str) and (not math.isfinite(value) or value <= 0):
            raise ConfigError(f"{option} {text!r}: {part!r} must be a finite number > 0")
        if value in values:
            raise ConfigError(f"{option} {text!r}: {part!r} given twice")
        values.append(value)
    return tuple(values)


def parse_think_time(text: str | None, base_dir: Path | None = None) -> ThinkTime:
    """`{kind: exponential, mean_s: 5, seed: 1}` (the workload's think_time mapping, as YAML)."""
    if text is None:
        return NO_THINK_TIME
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        raise ConfigError(
            f"--think-time {text!r}: not a YAML mapping (e.g. '{{kind: exponential, mean_s: 5}}')"
        ) from None
    if isinstance(data, str) and data.strip() == "none":
        data = {"kind": "none"}
    if not isinstance(data, dict):
        raise ConfigError(f"--think-time {text!r}: a mapping such as {{kind: fixed, seconds: 5}}")
    try:
        model = ThinkTime(**data)
    except ValidationError as exc:
        loc, msg = describe_error(exc)
        raise ConfigError(f"--think-time {text!r}: {loc}: {msg}") from None
    if model.kind == "file" and base_dir is not None and not Path(model.path or "").is_absolute():
        model = model.model_copy(update={"path": str(base_dir / (model.path or ""))})
    return model


def check_think_time(think: ThinkTime, traffic: TrafficShape, concurrency: tuple[int, ...]) -> None:
    """Draw every pause a point of the grid needs: a model it cannot draw (a file too short,
    unreadable) is refused now, not in the middle of the search."""
    if not think.active:
        return
    try:
        table = PauseTable(think)
        for conv in range(max(traffic.conversations(c) for c in concurrency)):
            for turn in range(2, traffic.turns + 1):
                table.pause(conv, turn)
    except ConfigError as exc:
        raise ConfigError(f"--think-time: {exc}") from None


def check_traffic(traffic: TrafficShape, max_model_len: int) -> None:
    for option, value in (
        ("--turns", traffic.turns),
        ("--context", traffic.context),
        ("--turn-tokens", traffic.turn_tokens),
        ("--output-tokens", traffic.output_tokens),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{option} {value!r}: must be an integer >= 1")
    if traffic.longest > max_model_len:
        raise ConfigError(
            f"--context {traffic.context}: the last turn needs {traffic.longest:,} tokens "
            f"(context + {traffic.turns - 1} x ({traffic.turn_tokens} + "
            f"{traffic.output_tokens}) + {traffic.output_tokens}), beyond the served "
            f"max-model-len {max_model_len:,}; vLLM answers such a request 400 and the "
            "simulator abandons the conversation, so no configuration can serve this workload"
        )


def check_grid(
    arms: tuple[str, ...], pools: tuple[float, ...], mns: tuple[int, ...], conc: tuple[int, ...]
) -> None:
    for name in arms:
        arm(name)
    if max(conc) > MAX_CONCURRENCY:
        raise ConfigError(f"--concurrency {max(conc)}: at most {MAX_CONCURRENCY}")
    size = len(arms) * len(pools) * len(mns) * len(conc)
    if size > MAX_GRID:
        raise ConfigError(f"grid of {size} configurations: at most {MAX_GRID}")


def served_max_model_len(arms: tuple[str, ...]) -> int:
    lengths = {int(base_serve(ARMS[a].profile).get("max-model-len", 142000)) for a in arms}
    if len(lengths) != 1:
        raise ConfigError(f"--arms: the arms serve different max-model-len {sorted(lengths)}")
    return lengths.pop()
