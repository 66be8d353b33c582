"""The regression verdict: a candidate run against a baseline run or the run history.

Matching. Points are matched by (parallel, number). Every point of the baseline must exist in
the candidate and vice versa, and every matched point must be valid (all its repeats): otherwise
the inputs are invalid and the verdict exits 2 with the reason. Two runs are comparable when
their *workload* is the same: dataset checksum, the sweep's points, offset, output length,
ignore_eos, multi-turn/max-turns and the per-GPU divisor
(:func:`harness.identity.workload_identity`).
Serve flags and the build may differ - that is what a regression test compares. (The
manifest's configuration key (:func:`harness.identity.configuration_key`) also hashes serve flags
and build, so a difference is reported, not refused.)

Values. A point's value is the median over its repeats; a history baseline's value is the
median over the last N accepted runs of each run's value.

Classification of one (point, metric), with b = baseline, c = candidate, threshold t, floor f,
band s (policy ``suspicious_band``, default 0.5), and ``worse`` = the relative change towards
worse ((b - c) / |b| when higher is better, (c - b) / |b| when lower is better; b = 0 with any
change counts as an infinite relative change):

1. |c - b| <= f                       -> ok (below the absolute floor, whatever the ratio)
2. worse >= t                         -> regression, unless the breach is within the noise:
   a. the candidate has >= 2 repeats: the median's confidence interval
      (harness.analysis.stats.median_ci at the policy's confidence) must lie entirely on the
      worse side of b (higher-better: CI high < b; lower-better: CI low > b);
   b. a single candidate value against a history of >= 3 accepted runs: it must also lie
      beyond the worst of those runs' values (the history's own spread);
   a breach that fails a or b is "suspicious" (breached once, within noise); a breach with
   neither (one candidate value against fewer than 3 baseline runs) is a regression whose noise
   was not tested (``Row.noise_tested`` false; the nightly confirms it by a rerun)
3. s * t <= worse < t                 -> suspicious (close to the threshold)
4. -worse >= t                        -> improvement
5. otherwise                          -> ok
A metric present on one side only is suspicious; absent on both sides it is not judged.

Curve-level metrics (harness.analysis.frontier) are computed per repeat index (repeat r of
every point forms one curve) and per baseline run, then reduced and classified exactly like a
point metric. The overall status is the worst class present
(regression > suspicious > improvement > ok). Exit code: 1 for a regression, else 0; invalid
or incomparable inputs raise :class:`IncomparableError` (exit 2).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

from harness.analysis import frontier
from harness.analysis.groups import PointValues, group_rows, point_rows
from harness.analysis.stats import median_ci as default_median_ci
from harness.errors import ReproError, RunError
from harness.gate.policy import CurveRule, MetricRule, RegressionPolicy
from harness.identity import workload_id, workload_identity
from harness.names import for_markdown, for_markdown_code
from harness.records import run_damage
from harness.results import METRICS, Run
from harness.text import fmt_number

CLASSES = ("ok", "improvement", "suspicious", "regression")
_SEVERITY = {name: rank for rank, name in enumerate(CLASSES)}


class IncomparableError(ReproError):
    """Candidate and baseline cannot be compared (exit 2)."""


# --------------------------------------------------------------------------- run views


@dataclass
class RunView:
    """What the verdict needs from a run; built from a run directory or a history record."""

    name: str
    source: str
    profile_name: str
    status: str
    workload: dict[str, Any]
    configuration_key: str  # harness.identity.configuration_key, as the manifest recorded it
    points: dict[tuple[int, int], PointValues]
    serve: dict[str, Any] = field(default_factory=dict)
    build: str | None = None
    overrides: list[str] = field(default_factory=list)

    @property
    def workload_id(self) -> str:
        return workload_id(self.workload)


def view_from_parts(
    *, name: str, source: str, manifest_data: dict[str, Any], rows: Sequence[dict[str, Any]]
) -> RunView:
    profile = manifest_data.get("profile") or {}
    return RunView(
        name=name,
        source=source,
        profile_name=manifest_data.get("profile_name", "?"),
        status=manifest_data.get("status", "?"),
        workload=workload_identity(manifest_data),
        # repro.run/1 manifests (and history rows holding one) named it workload_key
        configuration_key=manifest_data.get("configuration_key")
        or manifest_data.get("workload_key", ""),
        points=group_rows(rows),
        serve=dict(profile.get("serve") or {}),
        build=profile.get("build"),
        overrides=list(manifest_data.get("overrides") or []),
    )


def view_from_run(run: Run) -> RunView:
    damage = run_damage(run)  # its points are not what its manifest says: no verdict means much
    if damage:
        raise RunError(f"{run.root}: damaged run: {'; '.join(damage)}")
    return view_from_parts(
        name=run.name,
        source=str(run.root),
        manifest_data=run.manifest.model_dump(mode="json"),
        rows=point_rows(run),
    )


# --------------------------------------------------------------------------- classification


@dataclass
class Judgement:
    cls: str
    change: float | None  # signed relative change (c - b) / |b|
    worse: float | None  # relative change towards worse (positive = worse)
    reason: str
    noise_tested: bool = True  # False: a breach judged on one value, no noise estimate at hand


def relative(delta: float, base: float) -> float:
    if base != 0:
        return delta / abs(base)
    return 0.0 if delta == 0 else math.copysign(math.inf, delta)


def classify(
    baseline: float | None,
    candidate: float | None,
    *,
    direction: str,
    threshold: float,
    floor: float = 0.0,
    band: float = 0.5,
    ci: tuple[float, float] | None = None,
    spread: tuple[float, float] | None = None,
) -> Judgement:
    """Classify one comparison (rules in the module docstring); ``ci`` is the candidate
    median's CI (rule 2a), ``spread`` the (min, max) of the history runs' values (rule 2b)."""
    if baseline is None or candidate is None:
        side = "candidate" if candidate is None else "baseline"
        return Judgement("suspicious", None, None, f"no value in the {side}")
    delta = candidate - baseline
    change = relative(delta, baseline)
    worse = -change if direction == "higher" else change
    if abs(delta) <= floor:
        return Judgement("ok", change, worse, f"|change| {abs(delta):.4g} <= floor {floor:g}")
    if worse >= threshold:
        breach = f"worse by {_pct(worse)} >= {_pct(threshold)}"
        noise = _within_noise(baseline, candidate, direction, ci, spread)
        if noise:
            return Judgement("suspicious", change, worse, f"{breach}, but {noise}")
        if ci is None and spread is None:
            untested = f"{breach} (one value, fewer than {MIN_HISTORY_FOR_SPREAD} baseline runs)"
            return Judgement("regression", change, worse, untested, noise_tested=False)
        return Judgement("regression", change, worse, breach)
    if worse >= band * threshold:
        return Judgement(
            "suspicious",
            change,
            worse,
            f"worse by {_pct(worse)}, within {band:g}x..1x of the {_pct(threshold)} threshold",
        )
    if -worse >= threshold:
        return Judgement("improvement", change, worse, f"better by {_pct(-worse)}")
    return Judgement("ok", change, worse, "within threshold")


def _within_noise(
    baseline: float,
    candidate: float,
    direction: str,
    ci: tuple[float, float] | None,
    spread: tuple[float, float] | None,
) -> str | None:
    """Why a threshold breach is still within the noise (rules 2a and 2b), or None."""
    if ci is not None:
        low, high = ci
        outside = high < baseline if direction == "higher" else low > baseline
        if not outside:
            return f"the CI [{low:.4g}, {high:.4g}] includes the baseline {baseline:.4g}"
    elif spread is not None:
        worst = spread[0] if direction == "higher" else spread[1]
        beyond = candidate < worst if direction == "higher" else candidate > worst
        if not beyond:
            return f"within the history's range [{spread[0]:.4g}, {spread[1]:.4g}]"
    return None


def _pct(value: float) -> str:
    return "inf %" if math.isinf(value) else f"{100 * value:.1f} %"


# --------------------------------------------------------------------------- verdict


@dataclass
class Row:
    scope: str  # "point" or "curve"
    point: str  # point label, or the curve metric's variant (e.g. "@20")
    parallel: int | None
    number: int | None
    metric: str
    direction: str
    baseline: float | None
    candidate: float | None
    ci: tuple[float, float] | None
    repeats: int
    change: float | None
    threshold: float
    floor: float
    cls: str
    reason: str
    noise_tested: bool = True  # see Judgement.noise_tested


@dataclass
class Verdict:
    candidate: str
    candidate_source: str
    baseline: str  # run name, or "history KEY (runs a, b, c)"
    baseline_runs: list[str]
    policy: str
    rows: list[Row]
    notes: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        worst = max((_SEVERITY[r.cls] for r in self.rows), default=0)
        return CLASSES[worst]

    @property
    def exit_code(self) -> int:
        return 1 if self.status == "regression" else 0

    def flagged(self, cls: str) -> list[Row]:
        return [r for r in self.rows if r.cls == cls]

    def regressed_metrics(self) -> list[str]:
        return sorted({r.metric for r in self.flagged("regression")})

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": "repro.verdict/1",
            "status": self.status,
            "exit_code": self.exit_code,
            "candidate": self.candidate,
            "candidate_source": self.candidate_source,
            "baseline": self.baseline,
            "baseline_runs": self.baseline_runs,
            "policy": self.policy,
            "regressed_metrics": self.regressed_metrics(),
            "notes": self.notes,
            "rows": [_json_safe(asdict(r)) for r in self.rows],
        }


def _json_safe(row: dict[str, Any]) -> dict[str, Any]:
    return {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()
    }


def check_comparable(candidate: RunView, baselines: Sequence[RunView]) -> list[str]:
    """Raise IncomparableError for invalid or incomparable inputs; return informative notes."""
    problems: list[str] = []
    notes: list[str] = []
    if candidate.status not in ("complete", "partial"):
        problems.append(f"candidate {candidate.name} has status {candidate.status!r}")
    for base in baselines:
        if base.workload != candidate.workload:
            diffs = [
                f"{k}: {base.workload.get(k)!r} (baseline) vs {candidate.workload.get(k)!r}"
                for k in candidate.workload
                if base.workload.get(k) != candidate.workload.get(k)
            ]
            problems.append(
                f"different workload between {base.name} and {candidate.name}: " + "; ".join(diffs)
            )
            continue
        missing = sorted(set(base.points) - set(candidate.points))
        extra = sorted(set(candidate.points) - set(base.points))
        if missing:
            labels = ", ".join(base.points[k].label for k in missing)
            problems.append(f"candidate {candidate.name} lacks points {labels} of {base.name}")
        if extra:
            labels = ", ".join(candidate.points[k].label for k in extra)
            problems.append(f"baseline {base.name} lacks points {labels} of {candidate.name}")
        if base.profile_name != candidate.profile_name:
            notes.append(f"profiles differ: {base.profile_name} vs {candidate.profile_name}")
        if base.configuration_key != candidate.configuration_key:
            notes.append(
                f"configuration key differs from {base.name} (serve flags or build differ; "
                "the client workload is the same)"
            )
    for run in (candidate, *baselines):
        for pv in run.points.values():
            for reason in pv.invalid:
                problems.append(f"{run.name} point {pv.label} is invalid ({reason})")
            if not pv.invalid and not pv.repeats:
                problems.append(f"{run.name} point {pv.label} has no finished repeat")
    if candidate.overrides:
        notes.append("candidate overrides: " + " ".join(candidate.overrides))
    if problems:
        raise IncomparableError("; ".join(dict.fromkeys(problems)))
    return list(dict.fromkeys(notes))


def evaluate(
    candidate: RunView,
    baselines: Sequence[RunView],
    policy: RegressionPolicy,
    *,
    baseline_label: str | None = None,
    median_ci: Callable[..., tuple[float, float, float]] | None = None,
) -> Verdict:
    """Judge ``candidate`` against one baseline run, or the median of several (history)."""
    if not baselines:
        raise IncomparableError("no baseline run to compare with")
    notes = check_comparable(candidate, baselines)
    median_ci = median_ci or default_median_ci  # the sweep summaries' CI method
    rows: list[Row] = []
    keys = sorted(candidate.points)
    for metric, rule in policy.metrics.items():
        direction = policy.direction(metric)
        for key in keys:
            cand = candidate.points[key]
            if rule.points is not None and cand.label not in rule.points:
                continue
            row = _point_row(
                metric, rule, direction, cand, [b.points[key] for b in baselines], policy, median_ci
            )
            if row is not None:
                rows.append(row)
    rows.extend(_curve_rows(candidate, baselines, policy, median_ci))
    names = [b.name for b in baselines]
    return Verdict(
        candidate=candidate.name,
        candidate_source=candidate.source,
        baseline=baseline_label or (names[0] if len(names) == 1 else ", ".join(names)),
        baseline_runs=names,
        policy=str(policy.source) if policy.source else "(inline)",
        rows=rows,
        notes=notes,
    )


MIN_HISTORY_FOR_SPREAD = 3


def reduce_side(
    cand_values: Sequence[float],
    base_values: Sequence[float],
    confidence: float,
    median_ci: Callable[..., tuple[float, float, float]],
) -> tuple[float | None, float | None, tuple[float, float] | None, tuple[float, float] | None]:
    """(baseline, candidate, candidate CI, history spread) from raw per-repeat / per-run values."""
    base = statistics.median(base_values) if base_values else None
    cand = statistics.median(cand_values) if cand_values else None
    ci = None
    if len(cand_values) >= 2:
        _, low, high = median_ci(list(cand_values), confidence)
        ci = (low, high)
    spread = None
    if ci is None and len(base_values) >= MIN_HISTORY_FOR_SPREAD:
        spread = (min(base_values), max(base_values))
    return base, cand, ci, spread


def _point_row(
    metric: str,
    rule: MetricRule,
    direction: str,
    cand: PointValues,
    bases: Sequence[PointValues],
    policy: RegressionPolicy,
    median_ci: Callable[..., tuple[float, float, float]],
) -> Row | None:
    base_values = [v for v in (p.median(metric) for p in bases) if v is not None]
    values = cand.values(metric)
    base_value, cand_value, ci, spread = reduce_side(
        values, base_values, policy.confidence, median_ci
    )
    if base_value is None and cand_value is None:
        return None  # not measurable on this arm (e.g. acceptance length without MTP)
    judged = classify(
        base_value,
        cand_value,
        direction=direction,
        threshold=rule.threshold,
        floor=rule.floor,
        band=policy.band(rule),
        ci=ci,
        spread=spread,
    )
    return Row(
        "point",
        cand.label,
        cand.parallel,
        cand.number,
        metric,
        direction,
        base_value,
        cand_value,
        ci,
        len(values),
        judged.change,
        rule.threshold,
        rule.floor,
        judged.cls,
        judged.reason,
        judged.noise_tested,
    )


def _curves_per_repeat(view: RunView) -> list[list[tuple[float, float]]]:
    """One (interactivity, throughput) curve per repeat index present at every point."""
    counts = [len(pv.repeats) for pv in view.points.values()]
    if not counts:
        return []
    curves_out = []
    for r in range(min(counts)):
        pts = []
        for pv in view.points.values():
            x = pv.repeats[r].get("interactivity")
            y = pv.repeats[r].get("throughput_per_gpu")
            if x is not None and y is not None:
                pts.append((float(x), float(y)))
        curves_out.append(pts)
    return curves_out


def _median_curve(view: RunView) -> list[tuple[float, float]]:
    out = []
    for pv in view.points.values():
        x, y = pv.median("interactivity"), pv.median("throughput_per_gpu")
        if x is not None and y is not None:
            out.append((x, y))
    return out


def _curve_rows(
    candidate: RunView,
    baselines: Sequence[RunView],
    policy: RegressionPolicy,
    median_ci: Callable[..., tuple[float, float, float]],
) -> list[Row]:
    rows: list[Row] = []
    cand_curves = _curves_per_repeat(candidate)
    base_curves = [_median_curve(b) for b in baselines]

    def add(metric: str, variant: str, rule: CurveRule, fn: Callable[[list], float | None]) -> None:
        cand_values = [v for v in (fn(c) for c in cand_curves) if v is not None]
        base_values = [v for v in (fn(c) for c in base_curves) if v is not None]
        base_value, cand_value, ci, spread = reduce_side(
            cand_values, base_values, policy.confidence, median_ci
        )
        if base_value is None and cand_value is None:
            return
        judged = classify(
            base_value,
            cand_value,
            direction="higher",
            threshold=rule.threshold,
            floor=rule.floor,
            band=policy.band(rule),
            ci=ci,
            spread=spread,
        )
        rows.append(
            Row(
                "curve",
                variant,
                None,
                None,
                metric,
                "higher",
                base_value,
                cand_value,
                ci,
                len(cand_values),
                judged.change,
                rule.threshold,
                rule.floor,
                judged.cls,
                judged.reason,
                judged.noise_tested,
            )
        )

    auc_rule = policy.curves.get("frontier_auc")
    if auc_rule is not None:
        add("frontier_auc", "frontier", auc_rule, frontier.frontier_auc)
    at_rule = policy.curves.get("throughput_at_interactivity")
    if at_rule is not None:
        for x in at_rule.at:
            at_x = partial(frontier.throughput_at, interactivity=x)
            add("throughput_at_interactivity", f"@{x:g}", at_rule, at_x)
    return rows


# --------------------------------------------------------------------------- rendering


def _change(row: Row) -> str:
    if row.change is None:
        return "-"
    return "inf" if math.isinf(row.change) else f"{100 * row.change:+.1f}%"


_HEADER = ("point", "metric", "baseline", "candidate", "CI", "change", "threshold", "class")


def _cells(row: Row) -> tuple[str, ...]:
    ci = f"[{fmt_number(row.ci[0])}, {fmt_number(row.ci[1])}]" if row.ci else "-"
    return (
        row.point,
        row.metric,
        fmt_number(row.baseline),
        fmt_number(row.candidate),
        ci,
        _change(row),
        f"{100 * row.threshold:.0f}%/{row.floor:g}",
        row.cls,
    )


def render_table(verdict: Verdict, *, all_rows: bool = True) -> str:
    rows = verdict.rows if all_rows else [r for r in verdict.rows if r.cls != "ok"]
    cells = [_HEADER, *(_cells(r) for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(_HEADER))]
    lines = [
        f"candidate {verdict.candidate}  vs  baseline {verdict.baseline}",
        f"policy {verdict.policy}",
    ]
    lines += [f"note: {n}" for n in verdict.notes]
    lines.append("  ".join(h.ljust(w) for h, w in zip(_HEADER, widths, strict=True)))
    for c in cells[1:]:
        lines.append("  ".join(v.ljust(w) for v, w in zip(c, widths, strict=True)))
    lines.append(_status_line(verdict))
    return "\n".join(lines)


def _status_line(verdict: Verdict) -> str:
    counts = {c: len(verdict.flagged(c)) for c in CLASSES}
    text = f"verdict: {verdict.status.upper()} ({', '.join(f'{v} {k}' for k, v in counts.items())})"
    if verdict.status == "regression":
        text += "; regressed: " + ", ".join(verdict.regressed_metrics())
    return text


def render_markdown(verdict: Verdict, *, title: str | None = None) -> str:
    icon = {"ok": "✅", "improvement": "🟢", "suspicious": "🟡", "regression": "🔴"}
    lines = [
        f"### {title or 'Regression verdict'}: {icon[verdict.status]} {verdict.status}",
        "",
        f"- candidate: {for_markdown_code(verdict.candidate)}",  # names read from records:
        f"- baseline: {for_markdown_code(verdict.baseline)}",  # a newline or backtick in one
        f"- policy: {for_markdown_code(verdict.policy)}",  # must not leave the code span
    ]
    lines += [f"- note: {for_markdown(n)}" for n in verdict.notes]
    if verdict.status == "regression":
        lines.append(f"- regressed metrics: {', '.join(verdict.regressed_metrics())}")
    lines += ["", "| " + " | ".join(_HEADER) + " | reason |", "|" + "---|" * (len(_HEADER) + 1)]
    order = sorted(verdict.rows, key=lambda r: -_SEVERITY[r.cls])
    for row in order:
        cells = list(_cells(row))
        cells[-1] = f"{icon[row.cls]} {row.cls}"
        reason = for_markdown(row.reason)  # a bare | would split the table cell
        lines.append("| " + " | ".join(cells) + f" | {reason} |")
    return "\n".join(lines) + "\n"


def render_json(verdict: Verdict) -> str:
    return json.dumps(verdict.to_dict(), indent=2)


def describe_metric(metric: str) -> str:
    spec = METRICS.get(metric)
    return f"{spec.label} ({spec.unit})" if spec else metric
