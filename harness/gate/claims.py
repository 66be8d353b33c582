"""Claims as data: statements a reproduction must keep satisfying (``launch/claims/*.yaml``).

A claims file names *arms* (matched to runs by profile name, or given explicitly as
``ARM=RUN_DIR``) and *claims*, each comparing an operand with a number or with another operand
times a factor::

    arms:
      hisparse: {profiles: [hisparse384, upstream-hisparse384]}
      offloading: {profiles: [offload512, upstream-offload512]}
    claims:
      - id: hisparse-c32-occupancy
        text: At c32 HiSparse keeps at least 17 requests running
        left: {arm: hisparse, point: c32, metric: occupancy}
        op: ">="
        value: 17
      - id: occupancy-ratio-c32
        left: {arm: hisparse, point: c32, metric: occupancy}
        op: ">="
        right: {arm: offloading, point: c32, metric: occupancy}
        factor: 2.5                     # left >= 2.5 x right

An operand's ``point`` is a label (``c32``), ``top`` (the highest-concurrency point), ``slo``
(the highest-concurrency point whose requests met the workload's latency objectives for at
least 90 %: ``{point: slo, field: parallel}`` is "the highest concurrency that meets them") or
``all`` (every point must satisfy the claim; left side only). It reads either a ``metric``
(``harness.results.METRICS``; the median over valid repeats) or a ``field`` of the point
(``parallel`` or ``number``). A claim whose arm has no run is *skipped*; one whose value is
missing *fails* (the run did not produce the evidence).

A claim can instead state what became of an arm's run as a whole (``harness.gate.outcome``)::

      - id: offloading-1m-refused
        outcome: {arm: offloading-1m, expect: refused, reason: "max seq len (1048576)"}
      - id: hisparse-1m-serves
        outcome: {arm: hisparse-1m, expect: served, min_prompt_tokens: 1000000}
"""

from __future__ import annotations

import operator
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.analysis.goodput import meeting_slo
from harness.analysis.groups import group_by_point
from harness.config import load_yaml
from harness.errors import ReproError
from harness.gate import outcome
from harness.paths import CLAIMS_DIR
from harness.results import METRICS, PointRecord, Run, load_run
from harness.run.config import configured_gpus

OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Arm(_Strict):
    profiles: list[str] = Field(min_length=1)
    description: str = ""


class Operand(_Strict):
    arm: str
    point: str
    metric: str | None = None
    field: Literal["parallel", "number"] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> Operand:
        if (self.metric is None) == (self.field is None):
            raise ValueError("give exactly one of metric or field")
        if self.metric is not None and self.metric not in METRICS:
            raise ValueError(f"unknown metric {self.metric!r}")
        return self

    def describe(self) -> str:
        return f"{self.arm}.{self.point}.{self.metric or self.field}"


class Outcome(_Strict):
    """What became of an arm's run as a whole: it started and served every request, or its
    server refused to start (for a reason that contains `reason`)."""

    arm: str
    expect: Literal["served", "refused"]
    reason: str | None = None  # refused: text the recorded start-up reason must contain
    min_prompt_tokens: int | None = Field(None, ge=1)  # served: each point's mean prompt

    @model_validator(mode="after")
    def _keys_for_expect(self) -> Outcome:
        if self.expect == "served" and self.reason is not None:
            raise ValueError("reason applies to expect: refused only")
        if self.expect == "refused" and self.min_prompt_tokens is not None:
            raise ValueError("min_prompt_tokens applies to expect: served only")
        return self


class Claim(_Strict):
    id: str
    text: str = ""
    left: Operand | None = None
    op: Literal[">=", ">", "<=", "<"] | None = None
    value: float | None = None
    right: Operand | None = None
    factor: float = 1.0
    outcome: Outcome | None = None

    @model_validator(mode="after")
    def _one_rhs(self) -> Claim:
        if self.outcome is not None:
            given = [k for k in ("left", "op", "value", "right") if getattr(self, k) is not None]
            if given or self.factor != 1.0:
                raise ValueError(f"outcome stands alone; remove {', '.join(given) or 'factor'}")
            return self
        if self.left is None or self.op is None:
            raise ValueError("give left and op (a comparison), or outcome")
        if (self.value is None) == (self.right is None):
            raise ValueError("give exactly one of value or right")
        if self.right is not None and self.right.point == "all":
            raise ValueError("right.point cannot be 'all'")
        return self

    def arms(self) -> list[str]:
        sides = [self.outcome, self.left, self.right]
        return list(dict.fromkeys(s.arm for s in sides if s is not None))


class ClaimsFile(_Strict):
    description: str = ""
    source: str = ""
    arms: dict[str, Arm]
    claims: list[Claim] = Field(min_length=1)

    @model_validator(mode="after")
    def _arms_exist(self) -> ClaimsFile:
        for index, claim in enumerate(self.claims):
            for arm in claim.arms():
                if arm not in self.arms:
                    raise ValueError(f"claims.{index} ({claim.id}): unknown arm {arm!r}")
        return self


def load_claims(path: Path | str) -> ClaimsFile:
    path = Path(path)
    if not path.is_file() and not path.suffix and (CLAIMS_DIR / f"{path}.yaml").is_file():
        path = CLAIMS_DIR / f"{path}.yaml"
    return load_yaml(path, ClaimsFile, "claims file")


@dataclass
class ClaimResult:
    id: str
    text: str
    status: Literal["holds", "fails", "skipped"]
    detail: str
    left: float | None = None
    right: float | None = None


def _points(run: Run, selector: str) -> list[list[PointRecord]]:
    """Groups of repeats (valid ones) for the selected point(s)."""
    ordered = list(group_by_point(run.points).values())
    if selector == "all":
        return ordered
    if selector == "top":
        return ordered[-1:]
    if selector == "slo":  # the highest concurrency meeting the objectives (analysis/goodput)
        return meeting_slo(ordered)[-1:]
    return [g for g in ordered if g[0].label == selector]


def _value(group: list[PointRecord], operand: Operand) -> float | None:
    if operand.field is not None:
        return float(getattr(group[0], operand.field))
    assert operand.metric is not None  # the validator: exactly one of metric or field
    values = [
        float(v) for p in group if p.valid and (v := p.metrics.get(operand.metric)) is not None
    ]
    return statistics.median(values) if values else None


def check_claims(claims: ClaimsFile, runs_by_arm: dict[str, Run]) -> list[ClaimResult]:
    results = []
    for claim in claims.claims:
        absent = [a for a in claim.arms() if a not in runs_by_arm]
        if absent:
            results.append(
                ClaimResult(claim.id, claim.text, "skipped", f"no run for arm {', '.join(absent)}")
            )
            continue
        if claim.outcome is not None:
            results.append(_check_outcome(claim, runs_by_arm[claim.outcome.arm]))
            continue
        results.append(_check_one(claim, runs_by_arm))
    return results


def _check_outcome(claim: Claim, run: Run) -> ClaimResult:
    want = claim.outcome
    assert want is not None
    if want.expect == "served":
        status, detail = outcome.served(run, want.min_prompt_tokens)
    else:
        status, detail = outcome.refused(run, want.reason)
    return ClaimResult(claim.id, claim.text, status, f"{want.arm} {want.expect}: {detail}")


def _check_one(claim: Claim, runs_by_arm: dict[str, Run]) -> ClaimResult:
    assert claim.left is not None and claim.op is not None  # the validator's comparison form
    compare = OPS[claim.op]
    if claim.right is None:
        assert claim.value is not None  # the validator: exactly one of value or right
        right_value = claim.value
        right_text = f"{claim.value:g}"
    else:
        groups = _points(runs_by_arm[claim.right.arm], claim.right.point)
        if not groups:
            return ClaimResult(
                claim.id, claim.text, "fails", f"{claim.right.describe()}: no such point"
            )
        raw = _value(groups[0], claim.right)
        if raw is None:
            return ClaimResult(claim.id, claim.text, "fails", f"{claim.right.describe()}: no value")
        right_value = raw * claim.factor
        right_text = (
            f"{claim.factor:g} x {raw:.4g} = {right_value:.4g}"
            if claim.factor != 1
            else f"{raw:.4g}"
        )
    groups = _points(runs_by_arm[claim.left.arm], claim.left.point)
    if not groups:
        return ClaimResult(claim.id, claim.text, "fails", f"{claim.left.describe()}: no such point")
    details, ok, shown = [], True, None
    for group in groups:
        value = _value(group, claim.left)
        label = group[0].label
        if value is None:
            details.append(f"{label}: no value")
            ok = False
            continue
        holds = compare(value, right_value)
        ok = ok and holds
        shown = value if shown is None else shown
        detail = f"{label}: {value:.4g} {claim.op} {right_text}"
        if claim.right is not None and right_value and claim.factor != 1:
            detail += f" (ratio {value / (right_value / claim.factor):.3g}x)"
        details.append(detail + ("" if holds else "  <-- fails"))
    return ClaimResult(
        claim.id,
        claim.text,
        "holds" if ok else "fails",
        f"{claim.left.describe()}: " + "; ".join(details),
        shown,
        right_value,
    )


def match_runs(
    claims: ClaimsFile, runs: Sequence[Run], explicit: dict[str, Path] | None = None
) -> tuple[dict[str, Run], list[str]]:
    """Map arms to runs: explicit ``ARM=RUN`` first, else by profile name (the latest run wins)."""
    notes: list[str] = []
    mapping: dict[str, Run] = {}
    for arm, run_dir in (explicit or {}).items():
        if arm not in claims.arms:
            raise ReproError(
                f"--arm {arm}: not an arm of the claims file ({', '.join(claims.arms)})"
            )
        mapping[arm] = load_run(run_dir)
    for run in sorted(runs, key=lambda r: r.manifest.created_at):
        matched = [
            a for a, spec in claims.arms.items() if run.manifest.profile_name in spec.profiles
        ]
        if not matched:
            notes.append(f"run {run.name} (profile {run.manifest.profile_name}) matches no arm")
        for arm in matched:
            if arm in (explicit or {}):
                continue
            mapping[arm] = run
    return mapping, notes


def default_claims_path(gpus: int, profile_name: str | None = None) -> Path:
    """The claims file whose arms name the profile, else by GPUs (CPU tiny or the blog's)."""
    for path in sorted(CLAIMS_DIR.glob("*.yaml")):
        if profile_name and any(
            profile_name in a.profiles for a in load_claims(path).arms.values()
        ):
            return path
    return CLAIMS_DIR / ("cpu-tiny.yaml" if gpus == 0 else "glm53-blog.yaml")


def run_claims(
    run_dirs: Sequence[Path | str],
    *,
    claims_path: Path | str | None = None,
    explicit: dict[str, Path] | None = None,
    objectives: Any = None,
) -> tuple[list[ClaimResult], list[str]]:
    """``objectives`` (harness.analysis.slo.Objectives, `--slo`): goodput and SLO attainment
    are recomputed from the points' per-request tables under them before judging."""
    runs = [load_run(d) for d in run_dirs]
    if claims_path is None:
        first = runs[0] if runs else (load_run(next(iter(explicit.values()))) if explicit else None)
        if first is None:
            raise ReproError("give at least one run")
        gpus = configured_gpus(first)
        claims_path = default_claims_path(gpus, first.manifest.profile_name)
    claims = load_claims(claims_path)
    mapping, notes = match_runs(claims, runs, explicit)
    if objectives is not None:
        from harness.analysis.point_table import apply_objectives

        notes += [apply_objectives(run, objectives) for run in mapping.values()]
    results = check_claims(claims, mapping)
    if all(r.status == "skipped" for r in results):
        raise ReproError(
            f"{claims_path}: no claim applies to the given runs ("
            + "; ".join(notes or ["no arm matched"])
            + ")"
        )
    notes.insert(0, f"claims file {claims_path}")
    return results, notes


def claims_exit_code(results: Sequence[ClaimResult]) -> int:
    return 1 if any(r.status == "fails" for r in results) else 0


def render_claims(
    results: Sequence[ClaimResult], notes: Sequence[str] = (), *, markdown: bool = False
) -> str:
    icon = {"holds": "✅", "fails": "❌", "skipped": "⏭️"}
    if markdown:
        lines = ["| claim | status | detail |", "|---|---|---|"]
        lines += [
            f"| {r.id}: {r.text} | {icon[r.status]} {r.status} | "
            f"{r.detail.replace('|', chr(92) + '|')} |"
            for r in results
        ]
        return "\n".join([*(f"- {n}" for n in notes), "", *lines]) + "\n"
    lines = [*notes]
    for r in results:
        lines.append(f"{r.status.upper():8} {r.id}: {r.detail}")
    counts = {s: sum(r.status == s for r in results) for s in ("holds", "fails", "skipped")}
    lines.append("claims: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    return "\n".join(lines)


def claims_to_dict(results: Sequence[ClaimResult]) -> list[dict[str, Any]]:
    return [r.__dict__.copy() for r in results]
