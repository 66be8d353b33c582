"""The nightly loop: build -> sweep each arm -> verdict against history -> confirm suspicious
points by one rerun -> claims -> dashboard + markdown summary -> append to history.

Arms run in the order of ``harness.gate.order``: an arm whose coherence reference has no
recorded replies runs after that reference arm and is judged against its run of the night
(``--coherence-against``); the summary notes each arm's reference. Per arm (profile):

1. sweep it with the nightly build (``harness.run.sweep.run_sweep``) into ``OUT/nightly-STAMP-ARM``;
2. compare with the median of the last N accepted runs of the same history key
   (:mod:`harness.gate.history`); ``--set`` overrides count as part of the candidate, like the
   build, so ``--set serve.num-gpu-blocks-override=16`` is judged against the plain profile's
   history (that is how CI exercises a degraded build); with no accepted run yet the arm is
   ``new`` (it becomes the baseline);
3. rows a rerun decides are *provisional*: suspicious rows, and regressions judged on one value
   with no noise estimate (fewer than 3 accepted runs and one repeat: ``Row.noise_tested`` false,
   so a single noisy point cannot fail the night). Rerun exactly the points with a provisional
   row once (``only_points``) into ``...-rerun``; the rerun's values replace the first ones and
   each provisional row takes the rerun's class: a breach again -> regression (confirmed),
   inside the band -> suspicious, otherwise ok (cleared). Other rows keep their class, and so
   do curve rows when no point needed a rerun (a curve is not rerun on its own: that would be
   the whole sweep again);
4. record the run in the history: ``accepted`` unless its verdict is a regression, the inputs
   were invalid or the sweep failed (then ``rejected``, with the reason; ``repro history accept``
   overrides it later, e.g. for an expected step change).

Then the claims (``harness.gate.claims``) over all arms, a dashboard
(``harness.report.dashboard``) and a markdown summary (also appended to
``$GITHUB_STEP_SUMMARY`` when set). Exit code: 2 if any arm failed or was incomparable, else 1
if any arm regressed or any claim fails, else 0.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import env as harness_env
from harness.cluster.options import SlurmOptions
from harness.errors import ReproError, RunError
from harness.gate.claims import ClaimResult, claims_exit_code, render_claims, run_claims
from harness.gate.history import History, history_key
from harness.gate.order import ArmOrder, order_arms, reference_note
from harness.gate.policy import choose_regression_policy
from harness.gate.regress import (
    IncomparableError,
    Row,
    RunView,
    Verdict,
    check_comparable,
    evaluate,
    render_markdown,
    render_table,
    view_from_run,
)
from harness.paths import dashboards_dir, results_dir
from harness.report.dashboard import write_report
from harness.results import Run, atomic_write_json, atomic_write_text, load_run
from harness.run.sweep import SweepRequest, run_sweep
from harness.serve.builds import ensure_build
from harness.serve.profiles import load_profile

Echo = Callable[[str], None]


@dataclass
class ArmResult:
    profile: str
    run_dir: Path | None = None
    rerun_dir: Path | None = None
    key: str | None = None
    status: str = "error"  # ok / improvement / suspicious / regression / new / error
    verdict: Verdict | None = None
    error: str | None = None
    history_state: str | None = None
    notes: list[str] = field(default_factory=list)

    def load(self) -> Run:
        """This arm's run (the sweep names its directory before it starts)."""
        if self.run_dir is None:
            raise RunError(f"nightly arm {self.profile}: no run directory was assigned")
        return load_run(self.run_dir)


@dataclass
class NightlyResult:
    stamp: str
    build: str
    build_provenance: dict[str, Any]
    arms: list[ArmResult]
    claims: list[ClaimResult] = field(default_factory=list)
    claims_notes: list[str] = field(default_factory=list)
    dashboard: Path | None = None
    summary_path: Path | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if any(a.status == "error" for a in self.arms):
            return 2
        if any(a.status == "regression" for a in self.arms) or claims_exit_code(self.claims):
            return 1
        return 0


def resolve_build(build: str, echo: Echo) -> tuple[str, dict[str, Any]]:
    """Install (or reuse) the build; ``nightly@latest`` comes back as a concrete commit."""
    env = ensure_build(build, echo=echo)
    return env.name, dict(env.provenance or {})


def _arm_overrides(name: str, build: str, overrides: Sequence[str]) -> list[str]:
    """The user's --set values, plus ``build=`` when the arm's profile pins another build."""
    profile = load_profile(name, overrides)  # validates the overrides before anything runs
    return [*overrides, f"build={build}"] if profile.build != build else list(overrides)


def merge_rerun(first: RunView, rerun: RunView) -> RunView:
    """The first run's view with the rerun's points in place of the same (parallel, number)."""
    points = dict(first.points)
    points.update(rerun.points)
    return RunView(
        first.name,
        first.source,
        first.profile_name,
        first.status,
        first.workload,
        first.configuration_key,
        points,
        first.serve,
        first.build,
        first.overrides,
    )


def provisional(row: Row) -> bool:
    """A row whose class the nightly's rerun decides (module docstring, step 3)."""
    return row.cls == "suspicious" or (row.cls == "regression" and not row.noise_tested)


def confirm(first: Verdict, second: Verdict, rerun_name: str) -> Verdict:
    """Final classes: provisional rows of the first pass take the rerun's class."""
    by_key = {(r.scope, r.point, r.metric): r for r in second.rows}
    rows = []
    for row in first.rows:
        again = by_key.get((row.scope, row.point, row.metric))
        if provisional(row) and again is not None:
            if row.cls == "regression":
                outcome = "confirmed" if again.cls == "regression" else "not confirmed"
            else:
                outcome = {"regression": "breached again", "suspicious": "still in the band"}.get(
                    again.cls, "cleared"
                )
            again.reason = f"rerun {rerun_name}: {outcome}; {again.reason} (first: {row.reason})"
            rows.append(again)
        else:
            rows.append(row)
    return Verdict(
        first.candidate,
        first.candidate_source,
        first.baseline,
        first.baseline_runs,
        first.policy,
        rows,
        [*first.notes, f"provisional points rerun in {rerun_name}"],
    )


def judge_arm(
    arm: ArmResult,
    history: History,
    policy_path: Path | str | None,
    *,
    rerun: Callable[[list[str]], Path],
    echo: Echo,
) -> None:
    run = arm.load()
    policy = choose_regression_policy(run, policy_path)
    # The nightly's --set values are part of the candidate (like the build): same series.
    arm.key = history_key(run.manifest.model_dump(mode="json"), include_overrides=False)
    entries = history.baseline(arm.key, policy.baseline_runs, exclude_run_dir=run.root)
    if not entries:
        arm.status = "new"
        arm.notes.append(f"no accepted run with key {arm.key}: this run becomes the baseline")
        view = view_from_run(run)
        check_comparable(view, [])  # still refuse invalid points or a failed run
        return
    label = f"history {arm.key} (median of {len(entries)} accepted run(s))"
    baselines = [e.view() for e in entries]
    verdict = evaluate(view_from_run(run), baselines, policy, baseline_label=label)
    flagged = {
        r.parallel: r.point
        for r in verdict.rows
        if provisional(r) and r.scope == "point" and r.parallel is not None
    }
    labels = [flagged[p] for p in sorted(flagged)]
    if labels:
        echo(f"{arm.profile}: provisional at {', '.join(labels)}; rerunning those points once")
        arm.rerun_dir = rerun(labels)
        second_view = merge_rerun(view_from_run(run), view_from_run(load_run(arm.rerun_dir)))
        second = evaluate(second_view, baselines, policy, baseline_label=label)
        verdict = confirm(verdict, second, arm.rerun_dir.name)
    arm.verdict = verdict
    arm.status = verdict.status


def run_nightly(
    profiles: Sequence[str],
    build: str,
    *,
    overrides: Sequence[str] = (),
    claims_path: Path | str | None = None,
    policy_path: Path | str | None = None,
    out: Path | None = None,
    history_path: Path | str | None = None,
    summary_path: Path | None = None,
    dashboard: bool = True,
    echo: Echo = print,
    slurm: SlurmOptions | None = None,
) -> NightlyResult:
    """`slurm` given: the arms run as independent Slurm jobs (one array when their resources
    match), all submitted first; the nightly waits for them, then judges each arm as before
    (a suspicious arm's rerun is one more job)."""
    if not profiles:
        raise ReproError("--profiles: give at least one profile")
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out_dir = Path(out) if out else results_dir()
    for name in profiles:  # fail on a typo before a build that may take an hour
        load_profile(name, overrides)
    # ... or on a coherence reference with nothing recorded: its arm runs first, or it is an error
    order = order_arms(profiles, overrides)
    run_dirs = {e.arm: out_dir / f"nightly-{stamp}-{e.arm}" for e in order}
    against = {e.arm: str(run_dirs[e.after]) for e in order if e.after is not None}
    history = History.open(history_path)
    build_name, provenance = resolve_build(build, echo)
    echo(f"nightly {stamp}: build {build} -> {build_name}; history {history.path}")
    result = NightlyResult(stamp, build_name, provenance, [])
    sweep = run_sweep
    jobs: dict[str, Path | ReproError] = {}
    if slurm is not None:
        sweep, jobs = _sweep_arms_as_jobs(
            order, build_name, overrides, out_dir, stamp, slurm, echo, against
        )

    for entry in order:
        name = entry.arm
        arm = ArmResult(profile=name, notes=[reference_note(entry, run_dirs)])
        result.arms.append(arm)
        try:
            arm_sets = _arm_overrides(name, build_name, overrides)
            arm.run_dir = run_dirs[name]
            if slurm is None:
                run_sweep(
                    SweepRequest(
                        name,
                        overrides=arm_sets,
                        out=out_dir,
                        run_id=arm.run_dir.name,
                        coherence_against=against.get(name),
                    ),
                    echo=echo,
                )
            elif isinstance(job := jobs[name], ReproError):
                raise job

            def rerun(labels: list[str], name: str = name, sets: list[str] = arm_sets) -> Path:
                return sweep(
                    SweepRequest(
                        name,
                        overrides=sets,
                        out=out_dir,
                        run_id=f"nightly-{stamp}-{name}-rerun",
                        only_points=labels,
                        coherence_against=against.get(name),
                    ),
                    echo=echo,
                )

            judge_arm(arm, history, policy_path, rerun=rerun, echo=echo)
        except (IncomparableError, ReproError) as exc:
            arm.status, arm.error = "error", str(exc)
            echo(f"{name}: error: {exc}")
        record_arm(arm, history)
        echo(f"{name}: {arm.status}" + (f" ({arm.error})" if arm.error else ""))

    finished = [a.run_dir for a in result.arms if a.run_dir is not None and a.status != "error"]
    if finished:
        try:
            result.claims, result.claims_notes = run_claims(finished, claims_path=claims_path)
        except ReproError as exc:
            result.claims_notes = [f"claims not checked: {exc}"]
    if dashboard and finished:
        result.dashboard = _dashboard(result, finished, history)
    result.summary_path = summary_path or out_dir / f"nightly-{stamp}.md"
    publish_summary(result.summary_path, render_summary(result), summary_dict(result))
    for arm in result.arms:
        if arm.verdict is not None:
            echo(render_table(arm.verdict, all_rows=False))
    echo(render_claims(result.claims, result.claims_notes))
    echo(f"nightly summary: {result.summary_path}; exit {result.exit_code}")
    return result


def publish_summary(path: Path, text: str, record: dict[str, Any]) -> None:
    """The markdown summary and its JSON twin, written atomically; the markdown is also
    appended to $GITHUB_STEP_SUMMARY when set (the job's summary page)."""
    atomic_write_text(path, text)
    atomic_write_json(path.with_suffix(".json"), record)
    step_summary = harness_env.text("GITHUB_STEP_SUMMARY")
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as handle:
            handle.write(text)


def _sweep_arms_as_jobs(
    order: Sequence[ArmOrder],
    build: str,
    overrides: Sequence[str],
    out_dir: Path,
    stamp: str,
    slurm: SlurmOptions,
    echo: Echo,
    against: dict[str, str],
) -> tuple[Callable[..., Path], dict[str, Path | ReproError]]:
    """Submit the arms level by level (an arm judged against a reference arm's run of tonight
    waits for it), wait for each level; per arm its run or its error; and a one-job sweep for
    the reruns."""
    from harness.cluster.submit import run_as_jobs
    from harness.run.sweep import SweepRequest

    outcomes: dict[str, Path | ReproError] = {}
    for level in sorted({e.level for e in order}):
        requests = {}
        for entry in (e for e in order if e.level == level):
            name, failed = entry.arm, outcomes.get(entry.after or "")
            if isinstance(failed, ReproError):  # no replies to judge it against: not submitted
                outcomes[name] = ReproError(f"not run: reference arm {entry.after}: {failed}")
                continue
            try:
                sets = _arm_overrides(name, build, overrides)
            except ReproError as exc:
                outcomes[name] = exc
                continue
            requests[name] = SweepRequest(
                name,
                overrides=sets,
                out=out_dir,
                run_id=f"nightly-{stamp}-{name}",
                coherence_against=against.get(name),
            )
        try:
            done = run_as_jobs(list(requests.values()), slurm, echo=echo) if requests else []
        except ReproError as exc:  # nothing was submitted (e.g. sbatch refused): every arm fails
            done = [exc] * len(requests)
        outcomes.update(zip(requests, done, strict=True))

    def one_job(request: SweepRequest, echo: Echo = echo) -> Path:
        (result,) = run_as_jobs([request], slurm, echo=echo)
        if isinstance(result, ReproError):
            raise result
        return result

    return one_job, outcomes


def record_arm(arm: ArmResult, history: History) -> None:
    if arm.run_dir is None or not (arm.run_dir / "manifest.json").is_file():
        return  # nothing was written: nothing to keep
    try:
        run = load_run(arm.run_dir)
    except ReproError as exc:
        arm.notes.append(f"not recorded in history: {exc}")
        return
    if arm.status in ("regression", "error"):
        state = "rejected"
        reason = (
            "nightly: regression in " + ", ".join(arm.verdict.regressed_metrics())
            if arm.verdict is not None and not arm.error
            else f"nightly: {arm.error or arm.status}"
        )
    else:
        state, reason = "accepted", f"nightly: {arm.status}"
    key = arm.key or history_key(run.manifest.model_dump(mode="json"), include_overrides=False)
    history.record(
        run,
        state=state,
        reason=reason,
        key=key,
        verdict=arm.verdict.to_dict() if arm.verdict else None,
        actor="nightly",
    )
    arm.history_state = state


def _dashboard(result: NightlyResult, run_dirs: list[Path], history: History) -> Path | None:
    """One HTML report of tonight's arms; with a single arm, against its latest baseline run."""
    baseline = None
    if len(result.arms) == 1 and result.arms[0].key:
        previous = history.baseline(result.arms[0].key, 1, exclude_run_dir=run_dirs[0])
        if previous and Path(previous[-1].run_dir).is_dir():
            baseline = Path(previous[-1].run_dir)
    try:
        return write_report(
            run_dirs,
            baseline=baseline,
            out=dashboards_dir() / f"nightly-{result.stamp}.html",
            title=f"repro nightly {result.stamp} ({result.build})",
        )
    except (ReproError, OSError) as exc:
        result.notes.append(f"dashboard not written: {exc}")
        return None


def render_summary(result: NightlyResult) -> str:
    icon = {
        "ok": "✅",
        "improvement": "🟢",
        "suspicious": "🟡",
        "regression": "🔴",
        "new": "🆕",
        "error": "⛔",
    }
    commit = result.build_provenance.get("commit") or result.build_provenance.get("vllm_version")
    lines = [
        f"## repro nightly {result.stamp}",
        "",
        f"build `{result.build}`" + (f" (`{commit}`)" if commit else ""),
        "",
        "| arm | verdict | run | history | notes |",
        "|---|---|---|---|---|",
    ]
    for arm in result.arms:
        notes = "; ".join([*(arm.notes), *([arm.error] if arm.error else [])])
        if arm.verdict is not None and arm.verdict.status == "regression":
            notes = (
                "regressed: "
                + ", ".join(arm.verdict.regressed_metrics())
                + (f"; {notes}" if notes else "")
            )
        run = arm.run_dir.name if arm.run_dir else "-"
        lines.append(
            f"| {arm.profile} | {icon[arm.status]} {arm.status} | `{run}` | "
            f"{arm.history_state or '-'} | {notes} |"
        )
    lines.append("")
    for arm in result.arms:
        if arm.verdict is not None:
            lines.append(render_markdown(arm.verdict, title=arm.profile))
        elif arm.status == "new" and arm.run_dir is not None:
            lines += _new_arm_table(arm)
    lines += ["### Claims", "", render_claims(result.claims, result.claims_notes, markdown=True)]
    if result.dashboard:
        lines.append(f"Dashboard: `{result.dashboard}`")
    lines += [f"- {n}" for n in result.notes]
    lines.append(f"\nexit code {result.exit_code}\n")
    return "\n".join(lines)


_NEW_ARM_METRICS = (
    "occupancy",
    "engine_occupancy",
    "throughput_per_gpu",
    "interactivity",
    "preemptions",
    "waiting_max",
    "mtp_acceptance_length",
)


def _new_arm_table(arm: ArmResult) -> list[str]:
    """The first night of a series has no verdict: show what became the baseline."""
    run = arm.load()
    lines = [
        f"### {arm.profile}: 🆕 baseline",
        "",
        "| point | " + " | ".join(_NEW_ARM_METRICS) + " |",
        "|---|" + "---|" * len(_NEW_ARM_METRICS),
    ]
    for p in run.points:
        cells = [
            f"{p.metrics[k]:.4g}" if p.metrics.get(k) is not None else "-" for k in _NEW_ARM_METRICS
        ]
        lines.append(f"| {p.label} r{p.repeat} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def summary_dict(result: NightlyResult) -> dict[str, Any]:
    return {
        "schema_version": "repro.nightly/1",
        "stamp": result.stamp,
        "build": result.build,
        "build_provenance": json.loads(json.dumps(result.build_provenance, default=str)),
        "exit_code": result.exit_code,
        "arms": [
            {
                "profile": a.profile,
                "status": a.status,
                "run_dir": str(a.run_dir or ""),
                "rerun_dir": str(a.rerun_dir or ""),
                "history_key": a.key,
                "history_state": a.history_state,
                "error": a.error,
                "notes": a.notes,
                "verdict": a.verdict.to_dict() if a.verdict else None,
            }
            for a in result.arms
        ],
        "claims": [c.__dict__ for c in result.claims],
        "claims_notes": result.claims_notes,
        "dashboard": str(result.dashboard or ""),
        "notes": result.notes,
    }
