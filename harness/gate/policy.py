"""Regression policies: which metrics the verdict judges, in which direction, with what tolerance.

A regression policy is a YAML file (``launch/policies/*.yaml``) validated strictly: an unknown key anywhere
is an error naming the file and the key. Shape::

    description: "..."
    baseline_runs: 5          # history baseline = median of the last N accepted runs
    suspicious_band: 0.5      # a worsening of band x threshold .. threshold is "suspicious"
    confidence: 0.95          # confidence level of the per-point CI when the candidate has repeats
    metrics:                  # per-point metrics, keys from harness.results.METRICS
      throughput_per_gpu: {threshold: 0.10, floor: 1.0}
      preemptions: {threshold: 0.5, floor: 3, points: [c4, c8]}
    curves:                   # curve-level metrics over the interactivity/throughput frontier
      frontier_auc: {threshold: 0.10}
      throughput_at_interactivity: {threshold: 0.10, at: [20, 50]}

``threshold`` is relative (0.10 = 10 % worse than the baseline), ``floor`` absolute in the
metric's unit (changes smaller than the floor are ignored whatever their relative size),
``direction`` defaults to ``METRICS[key].better`` and is required for metrics without one.
The classification rules themselves live in :mod:`harness.gate.regress`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.config import load_yaml
from harness.paths import LAUNCH_DIR
from harness.results import METRICS, Run
from harness.run.config import configured_gpus

POLICIES_DIR = LAUNCH_DIR / "policies"
DEFAULT_GPU_POLICY = POLICIES_DIR / "default.yaml"
DEFAULT_CPU_POLICY = POLICIES_DIR / "cpu.yaml"

CURVE_METRICS = ("frontier_auc", "throughput_at_interactivity")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MetricRule(_Strict):
    threshold: float = Field(gt=0)
    floor: float = Field(default=0.0, ge=0)
    direction: Literal["higher", "lower"] | None = None
    suspicious_band: float | None = Field(default=None, gt=0, le=1)
    points: list[str] | None = None  # point labels (e.g. "c8"); None = every matched point


class CurveRule(_Strict):
    threshold: float = Field(gt=0)
    floor: float = Field(default=0.0, ge=0)
    suspicious_band: float | None = Field(default=None, gt=0, le=1)
    at: list[float] = Field(default_factory=list)  # interactivity values (tok/s/user)


class RegressionPolicy(_Strict):
    description: str = ""
    baseline_runs: int = Field(default=5, ge=1)
    suspicious_band: float = Field(default=0.5, gt=0, le=1)
    confidence: float = Field(default=0.95, gt=0, lt=1)
    metrics: dict[str, MetricRule]
    curves: dict[Literal["frontier_auc", "throughput_at_interactivity"], CurveRule] = Field(
        default_factory=dict
    )
    source: Path | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _known_metrics(self) -> RegressionPolicy:
        for key, rule in self.metrics.items():
            if key not in METRICS:
                known = ", ".join(sorted(METRICS))
                raise ValueError(f"metrics.{key}: unknown metric (known: {known})")
            if rule.direction is None and METRICS[key].better is None:
                raise ValueError(f"metrics.{key}: no default direction; set direction")
        curve = self.curves.get("throughput_at_interactivity")
        if curve is not None and not curve.at:
            raise ValueError("curves.throughput_at_interactivity.at: give at least one value")
        return self

    def direction(self, metric: str) -> Literal["higher", "lower"]:
        direction = self.metrics[metric].direction or METRICS[metric].better
        if direction is None:  # _known_metrics refuses such a policy when it is loaded
            raise ValueError(f"metrics.{metric}: no default direction; set direction")
        return direction

    def band(self, rule: MetricRule | CurveRule) -> float:
        return rule.suspicious_band if rule.suspicious_band is not None else self.suspicious_band


def load_regression_policy(path: Path | str) -> RegressionPolicy:
    """Read and validate a regression policy file; errors name the file and the offending key."""
    path = Path(path)
    if not path.is_file() and not path.suffix and (POLICIES_DIR / f"{path}.yaml").is_file():
        path = POLICIES_DIR / f"{path}.yaml"  # a bare name like "cpu"
    policy = load_yaml(path, RegressionPolicy, "regression policy file")
    policy.source = path
    return policy


def default_regression_policy_path(gpus: int) -> Path:
    """CPU profiles (gpus == 0) get thresholds from measured CPU noise; GPU arms the default."""
    return DEFAULT_CPU_POLICY if gpus == 0 else DEFAULT_GPU_POLICY


def choose_regression_policy(candidate: Run, policy_path: Path | str | None) -> RegressionPolicy:
    """The given regression policy file, else the default for the candidate's hardware (CPU or GPU)."""
    if policy_path is not None:
        return load_regression_policy(policy_path)
    return load_regression_policy(default_regression_policy_path(configured_gpus(candidate)))
