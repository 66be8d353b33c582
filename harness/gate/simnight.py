"""The nightly on the simulated engine: the GLM arms at the blog's scale on an ordinary runner.

Per arm, `repro simulate` (offline, deterministic) writes a run; its points are compared
*exactly* with the arm's last entry in the accepted simulated history, a JSON-lines file kept
in the repository (`harness.gate.history.SimulatedHistory`, default
`launch/history/sim-glm53-h200.jsonl`). A push runner starts with no state, so the history
that survives between pushes is the committed file: a change to the
engine, the analysis code or the calibration that moves the blog figure by one digit shows up
as `changed`, with the differing cells, and fails the job until someone accepts the new values
(`--accept --reason ...` appends them; the diff of that file is the review of the change).
The claims are checked over the same runs, as for real arms.

Exactness is equality of the JSON values written in `point.json` (metrics, the client
summary, validity), so nothing can move without being seen; run-to-run identity is what the
simulator guarantees (same inputs -> same outputs).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import __version__
from harness.errors import ReproError, RunError
from harness.gate.claims import ClaimResult, claims_exit_code, render_claims, run_claims
from harness.gate.history import DEFAULT_SIMULATED_HISTORY, SimulatedEntry, SimulatedHistory
from harness.gate.nightly import publish_summary
from harness.paths import REPO_ROOT, dashboards_dir, results_dir
from harness.report.dashboard import write_report
from harness.results import Run, load_run
from harness.sim.run import run_simulation

Echo = Callable[[str], None]
DEFAULT_CALIBRATION = REPO_ROOT / "launch" / "calibrations" / "glm53-h200.yaml"
DEFAULT_CLAIMS = REPO_ROOT / "launch" / "claims" / "glm53-blog.yaml"
GLM_ARMS = ("hisparse384", "offload512", "hisparse384-nomtp", "offload512-nomtp")
# Client fields that are wall-clock facts of the simulation process, not results.
_CLIENT_VOLATILE = {"raw"}


@dataclass
class Difference:
    point: str
    field: str
    accepted: Any
    now: Any

    def relative(self) -> str:
        a, b = self.accepted, self.now
        if isinstance(a, int | float) and isinstance(b, int | float) and a:
            return f"{100 * (b - a) / abs(a):+.3g} %"
        return "-"


@dataclass
class SimArm:
    profile: str
    run_dir: Path | None = None
    status: str = "error"  # identical / changed / new / error
    differences: list[Difference] = field(default_factory=list)
    input_changes: list[str] = field(default_factory=list)
    accepted: SimulatedEntry | None = None
    error: str | None = None

    def load(self) -> Run:
        """This arm's simulated run (its directory is named before the simulation starts)."""
        if self.run_dir is None:
            raise RunError(f"simulated arm {self.profile}: no run directory was assigned")
        return load_run(self.run_dir)


@dataclass
class SimNightly:
    stamp: str
    accepted_path: Path
    arms: list[SimArm]
    accept: bool
    claims: list[ClaimResult] = field(default_factory=list)
    claims_notes: list[str] = field(default_factory=list)
    dashboard: Path | None = None
    summary_path: Path | None = None
    appended: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if any(a.status == "error" for a in self.arms):
            return 2
        claims_failed = claims_exit_code(self.claims)
        if self.accept:
            return claims_failed
        if any(a.status in ("changed", "new") for a in self.arms) or claims_failed:
            return 1
        return 0


# --------------------------------------------------------------------------- a run's values


def point_values(run: Run) -> dict[str, dict[str, Any]]:
    """What the gate holds fixed per point: validity, every metric, the client summary."""
    values: dict[str, dict[str, Any]] = {}
    for p in run.points:
        row: dict[str, Any] = {"valid": p.valid, "invalid_reasons": list(p.invalid_reasons)}
        row.update({f"metrics.{k}": v for k, v in sorted(p.metrics.items())})
        if p.client is not None:
            client = p.client.model_dump(mode="json")
            row.update(
                {f"client.{k}": v for k, v in sorted(client.items()) if k not in _CLIENT_VOLATILE}
            )
        values[p.point_id] = json.loads(json.dumps(row))  # the JSON value, as stored
    return values


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def run_inputs(run: Run) -> dict[str, str | None]:
    build = run.manifest.build or {}
    cal = build.get("calibration") or {}
    return {
        "profile": _digest(run.manifest.profile),
        "calibration": (cal.get("sha256") or "")[:16] or None,
        "dataset": (run.manifest.dataset.get("sha256") or "")[:16] or None,
        "sim_params": _digest(build.get("params")),
    }


# The figure's coordinates first in a difference table, then the other metrics, then the rest.
_FIRST = ("metrics.occupancy", "metrics.interactivity", "metrics.throughput_per_gpu")


def _field_order(key: str) -> tuple[int, str]:
    if key in _FIRST:
        return _FIRST.index(key), key
    return (len(_FIRST) if key.startswith("metrics.") else len(_FIRST) + 1), key


def compare_exact(
    accepted: dict[str, dict[str, Any]], now: dict[str, dict[str, Any]]
) -> list[Difference]:
    diffs = []
    for point in sorted(set(accepted) | set(now)):
        if point not in now:
            diffs.append(Difference(point, "(point)", "present", "missing"))
            continue
        if point not in accepted:
            diffs.append(Difference(point, "(point)", "absent", "new"))
            continue
        a, b = accepted[point], now[point]
        for key in sorted(set(a) | set(b), key=_field_order):
            if a.get(key, "(absent)") != b.get(key, "(absent)"):
                diffs.append(Difference(point, key, a.get(key), b.get(key)))
    return diffs


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO_ROOT), *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _commit() -> str | None:
    """HEAD, marked `+dirty` when the tree has changes (the values came from uncommitted code)."""
    head = _git("rev-parse", "HEAD")
    if head and _git("status", "--porcelain", "--untracked-files=no"):
        head += "+dirty"
    return head


def entry_for(arm: str, run: Run, reason: str) -> SimulatedEntry:
    return SimulatedEntry(
        arm=arm,
        accepted_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        reason=reason,
        commit=_commit(),
        harness_version=__version__,
        inputs=run_inputs(run),
        points=point_values(run),
    )


# --------------------------------------------------------------------------- the loop


def judge_sim_arm(arm: SimArm, history: SimulatedHistory) -> None:
    run = arm.load()
    arm.accepted = history.latest(arm.profile)
    if arm.accepted is None:
        arm.status = "new"
        return
    arm.differences = compare_exact(arm.accepted.points, point_values(run))
    inputs = run_inputs(run)
    arm.input_changes = [
        f"{key} {arm.accepted.inputs.get(key)} -> {inputs.get(key)}"
        for key in sorted(set(inputs) | set(arm.accepted.inputs))
        if inputs.get(key) != arm.accepted.inputs.get(key)
    ]
    arm.status = "changed" if arm.differences else "identical"


def run_sim_nightly(
    profiles: Sequence[str] = GLM_ARMS,
    *,
    calibration: Path | None = DEFAULT_CALIBRATION,
    dataset: str | None = None,
    points: Sequence[str] | None = None,
    accepted_path: Path = DEFAULT_SIMULATED_HISTORY,
    accept: bool = False,
    reason: str | None = None,
    claims_path: Path | None = DEFAULT_CLAIMS,
    out: Path | None = None,
    summary_path: Path | None = None,
    dashboard: bool = True,
    echo: Echo = print,
) -> SimNightly:
    if not profiles:
        raise ReproError("--profiles: give at least one profile")
    if accept and not (reason or "").strip():
        raise ReproError("--accept needs --reason: say why the simulated figure may move")
    history = SimulatedHistory.open(accepted_path)  # a malformed history fails before any work
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out_dir = Path(out) if out else results_dir()
    result = SimNightly(stamp, accepted_path, [], accept)
    echo(
        f"simulated nightly {stamp}: accepted history {accepted_path} ({len(history.entries)} entries)"
    )
    for name in profiles:
        arm = SimArm(name)
        result.arms.append(arm)
        try:
            started = time.monotonic()
            arm.run_dir = run_simulation(
                name,
                dataset=dataset,
                calibration=calibration,
                points=points,
                out=out_dir,
                run_id=f"nightly-sim-{stamp}-{name}",
            )
            judge_sim_arm(arm, history)
            echo(f"{name}: {arm.status} ({time.monotonic() - started:.1f} s)")
        except ReproError as exc:
            arm.status, arm.error = "error", str(exc)
            echo(f"{name}: error: {exc}")
    finished = [a.run_dir for a in result.arms if a.status != "error" and a.run_dir]
    if finished and claims_path is not None:
        try:
            result.claims, result.claims_notes = run_claims(finished, claims_path=claims_path)
        except ReproError as exc:
            result.claims_notes = [f"claims not checked: {exc}"]
    if accept and result.exit_code == 0:
        _accept(result, history, reason or "", echo)
    if dashboard and finished:
        result.dashboard = write_report(
            finished,
            out=dashboards_dir() / f"nightly-sim-{stamp}.html",
            title=f"repro simulated nightly {stamp}",
        )
    _write_summary(result, summary_path or out_dir / f"nightly-sim-{stamp}.md", echo)
    return result


def _accept(result: SimNightly, history: SimulatedHistory, reason: str, echo: Echo) -> None:
    """Append the arms that are new or changed; identical arms need no new entry."""
    new = [
        entry_for(a.profile, a.load(), reason)
        for a in result.arms
        if a.status in ("new", "changed")
    ]
    if new:
        history.append(new)
    result.appended = [e.arm for e in new]
    echo(f"accepted: {', '.join(result.appended) or 'nothing changed'} -> {result.accepted_path}")


def _write_summary(result: SimNightly, path: Path, echo: Echo) -> None:
    result.summary_path = path
    text = render_sim_summary(result)
    publish_summary(path, text, sim_summary_dict(result))
    echo(text)
    echo(f"simulated nightly summary: {path}; exit {result.exit_code}")


_ICON = {"identical": "✅", "changed": "🔴", "new": "🆕", "error": "⛔"}
_MAX_ROWS = 40


def render_sim_summary(result: SimNightly) -> str:
    lines = [
        f"## repro simulated nightly {result.stamp}",
        "",
        f"Exact gate against `{result.accepted_path.name}` (last accepted entry per arm).",
        "",
        "| arm | verdict | run | accepted | notes |",
        "|---|---|---|---|---|",
    ]
    for arm in result.arms:
        acc = arm.accepted
        since = f"{acc.accepted_at} ({(acc.commit or '?')[:10]})" if acc else "-"
        notes = arm.error or ""
        if arm.status == "changed":
            notes = f"{len(arm.differences)} value(s) differ"
            if arm.input_changes:
                notes += "; inputs: " + ", ".join(arm.input_changes)
            else:
                notes += "; same inputs: the code changed"
        elif arm.status == "new":
            notes = "no accepted entry: run with --accept --reason ... and commit the file"
        run = arm.run_dir.name if arm.run_dir else "-"
        lines.append(
            f"| {arm.profile} | {_ICON[arm.status]} {arm.status} | `{run}` | {since} | {notes} |"
        )
    lines.append("")
    for arm in result.arms:
        if arm.differences:
            lines += _difference_table(arm)
    if result.accept:
        appended = ", ".join(result.appended) or "nothing"
        lines += [f"Accepted (appended to the history): {appended}.", ""]
    lines += ["### Claims", "", render_claims(result.claims, result.claims_notes, markdown=True)]
    if result.dashboard:
        lines.append(f"Dashboard: `{result.dashboard}`")
    lines.append(f"\nexit code {result.exit_code}\n")
    return "\n".join(lines)


def _difference_table(arm: SimArm) -> list[str]:
    lines = [
        f"### {arm.profile}: changed",
        "",
        "| point | value | accepted | now | change |",
        "|---|---|---|---|---|",
    ]
    for d in arm.differences[:_MAX_ROWS]:
        lines.append(f"| {d.point} | {d.field} | {d.accepted} | {d.now} | {d.relative()} |")
    if len(arm.differences) > _MAX_ROWS:
        lines.append(f"| ... | {len(arm.differences) - _MAX_ROWS} more | | | |")
    return [*lines, ""]


def sim_summary_dict(result: SimNightly) -> dict[str, Any]:
    return {
        "schema_version": "repro.sim-nightly/1",
        "stamp": result.stamp,
        "accepted_history": str(result.accepted_path),
        "accept": result.accept,
        "appended": result.appended,
        "exit_code": result.exit_code,
        "arms": [
            {
                "profile": a.profile,
                "status": a.status,
                "run_dir": str(a.run_dir or ""),
                "error": a.error,
                "input_changes": a.input_changes,
                "differences": [d.__dict__ for d in a.differences],
            }
            for a in result.arms
        ],
        "claims": [c.__dict__ for c in result.claims],
        "claims_notes": result.claims_notes,
        "dashboard": str(result.dashboard or ""),
    }
