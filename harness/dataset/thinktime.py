"""Think time: the pause an agent spends running tools before it sends its next turn.

A workload names the pause before every turn after the first (turn 1 starts as soon as a
worker claims the conversation; the blog's workload has no pause at all)::

    think_time: {kind: none}                                   # the blog's
    think_time: {kind: fixed, seconds: 5}
    think_time: {kind: exponential, mean_s: 1.0, seed: 7}
    think_time: {kind: lognormal, median_s: 5, sigma: 1.0, seed: 7, max_s: 120}
    think_time: {kind: file, path: pauses.json}

A drawn pause depends only on (seed, dataset conversation index, turn), never on the order in
which workers reach it, so the real client, the HTTP-simulated engine and the offline
simulator draw exactly the same pause for the same turn. The per-turn file is JSON::

    {"pauses_s": [[p2, p3, ...], ...]}   # one list per dataset conversation: before turn 2, 3..

A conversation index beyond the file's list wraps round (EvalScope cycles the dataset the same
way); a turn beyond a conversation's list is an error naming the file.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, NonNegativeFloat, PositiveFloat, model_validator

from harness.config import read_json, require_mapping
from harness.errors import ConfigError

Kind = Literal["none", "fixed", "exponential", "lognormal", "file"]
_PARAMS: dict[str, tuple[str, ...]] = {
    "none": (),
    "fixed": ("seconds",),
    "exponential": ("mean_s",),
    "lognormal": ("median_s", "sigma"),
    "file": ("path",),
}


class ThinkTime(BaseModel):
    """The pause model of a workload (validated; unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Kind = "none"
    seconds: NonNegativeFloat | None = None  # fixed
    mean_s: PositiveFloat | None = None  # exponential
    median_s: PositiveFloat | None = None  # lognormal: exp(mu)
    sigma: NonNegativeFloat | None = None  # lognormal: shape
    path: str | None = None  # file
    seed: int = 0
    max_s: PositiveFloat | None = None  # cap on a drawn pause (a long tail can stall a point)

    @model_validator(mode="after")
    def _parameters_of_kind(self) -> ThinkTime:
        needed = _PARAMS[self.kind]
        missing = [k for k in needed if getattr(self, k) is None]
        if missing:
            raise ValueError(f"kind {self.kind!r} needs {', '.join(missing)}")
        extra = [
            k
            for k in ("seconds", "mean_s", "median_s", "sigma", "path")
            if k not in needed and getattr(self, k) is not None
        ]
        if extra:
            raise ValueError(f"kind {self.kind!r} takes no {', '.join(extra)}")
        return self

    @property
    def active(self) -> bool:
        """False when no turn can ever pause (the blog's workload, or a fixed 0)."""
        return not (self.kind == "none" or (self.kind == "fixed" and self.seconds == 0))

    def describe(self) -> str:
        if not self.active:
            return "no think time"
        params = ", ".join(f"{k}={getattr(self, k)}" for k in _PARAMS[self.kind])
        return f"{self.kind} think time ({params}, seed {self.seed})"


class PauseTable:
    """Draws the pause before (conversation, turn); turn numbers start at 1."""

    def __init__(self, model: ThinkTime, *, base_dir: Path | None = None) -> None:
        self.model = model
        self._file: list[list[float]] | None = None
        if model.kind == "file":
            self._file = load_pause_file(_resolve(model.path or "", base_dir))

    def pause(self, conversation: int, turn: int) -> float:
        if turn <= 1 or not self.model.active:
            return 0.0
        value = self._draw(conversation, turn)
        return min(value, self.model.max_s) if self.model.max_s is not None else value

    def _draw(self, conversation: int, turn: int) -> float:
        m = self.model
        if m.kind == "fixed":
            return float(m.seconds or 0.0)
        if m.kind == "file":
            assert self._file is not None
            pauses = self._file[conversation % len(self._file)]
            if turn - 2 >= len(pauses):
                raise ConfigError(
                    f"{m.path}: conversation {conversation % len(self._file)} lists "
                    f"{len(pauses)} pauses, turn {turn} needs {turn - 1}"
                )
            return pauses[turn - 2]
        # one generator per turn, seeded by a string: the same draw in every process
        rng = random.Random(f"repro-think:{m.seed}:{conversation}:{turn}")
        if m.kind == "exponential":
            return rng.expovariate(1.0 / float(m.mean_s or 1.0))
        return rng.lognormvariate(math.log(float(m.median_s or 1.0)), float(m.sigma or 0.0))


def _resolve(path: str, base_dir: Path | None) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() or base_dir is None else base_dir / p


def load_pause_file(path: Path) -> list[list[float]]:
    """The per-conversation pause lists of a think-time file (see the module docstring)."""
    data = require_mapping(read_json(path, "think-time file"), path, "think-time file")
    unknown = sorted(set(data) - {"pauses_s"})
    if unknown:
        raise ConfigError(f"{path}: key {unknown[0]!r}: unknown key (expected 'pauses_s')")
    rows = data.get("pauses_s")
    if not isinstance(rows, list) or not rows:
        raise ConfigError(f"{path}: key 'pauses_s': a non-empty list of per-conversation lists")
    out: list[list[float]] = []
    for i, row in enumerate(rows):
        if not isinstance(row, list):
            raise ConfigError(f"{path}: key 'pauses_s.{i}': a list of seconds, got {row!r}")
        values = []
        for j, value in enumerate(row):
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            if not ok or not math.isfinite(value) or value < 0:
                raise ConfigError(
                    f"{path}: key 'pauses_s.{i}.{j}': {value!r} is not a pause in seconds (>= 0)"
                )
            values.append(float(value))
        out.append(values)
    return out


NO_THINK_TIME = ThinkTime()
