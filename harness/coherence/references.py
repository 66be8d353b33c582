"""Is there anything to judge an arm against? Answered before a build, a dataset or a server
costs anything (issue 14).

Without recorded replies of the reference arm for the probe set, the check after readiness can
only say "unjudged", and every point of the arm would be invalid after hours of sweeping. So a
sweep refuses to start unless the reference is recorded, another reference is given
(`--coherence-against RUN_DIR|PROFILE`), or `--allow-incoherent` says the points count anyway.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.coherence.check import CheckPlan, load_reference, plan_check
from harness.coherence.grade import Check
from harness.errors import ConfigError
from harness.serve.profiles import Profile


class MissingReference(ConfigError):
    """The arm's coherence reference has no recorded replies for its probe set (exit 2)."""


def reference_problem(plan: CheckPlan) -> str | None:
    """Why the plan's reference replies cannot be judged against (None: they can).

    The same reading the check after readiness does: a missing file, a file recorded for
    another state of the probe set, or a run directory without coherence replies.
    """
    if plan.reference is None:
        return None
    loaded = load_reference(plan)
    return loaded.reason if isinstance(loaded, Check) else None


def is_run_dir(against: str) -> bool:
    return Path(against).expanduser().is_dir()


def missing_reference_message(
    profile: Profile, plan: CheckPlan, problem: str, *, allowed: bool = False
) -> str:
    """One line: what is missing, and the three ways out (or, allowed, what that means)."""
    path = plan.reference_file
    detail = f"missing {path}" if path is None or not path.is_file() else problem
    if is_run_dir(str(plan.reference)):
        what = f"coherence reference run {plan.reference} has no coherence replies"
    else:
        what = f"coherence reference {plan.reference} has no recorded replies"
    own = profile.coherence.reference if profile.coherence else None
    arm = own or ("REFERENCE_ARM" if is_run_dir(str(plan.reference)) else plan.reference)
    record = f"`repro coherence --profile {arm} --record`"
    head = f"profile {profile.name}: {what} for probe set {plan.probe_set.key} ({detail})"
    if allowed:
        return f"{head}; --allow-incoherent: the points count unjudged (record it: {record})"
    return (
        f"{head}; every point would be invalid. Record the reference first: {record} (on the "
        "arms' hardware), or judge against a run of the reference arm with "
        "`--coherence-against RUN_DIR`, or count the points anyway with `--allow-incoherent`"
    )


@dataclass
class CoherencePreflight:
    """What a sweep's coherence check will compare against, settled before the run starts."""

    plan: CheckPlan | None  # None: the profile has no coherence: block
    against: str | None  # --coherence-against (or the resumed run's), else the profile's
    notes: list[str] = field(default_factory=list)  # for the manifest

    def lines(self) -> list[str]:
        """What --dry-run prints after `coherence: `."""
        return self.plan.lines() if self.plan is not None else []

    def record_in(self, manifest: Any) -> None:
        """The override and the warnings go into the run's manifest (a RunManifest)."""
        if self.against is not None:
            manifest.coherence_against = self.against
            note = f"coherence: judged against {self.against} (--coherence-against)"
            if note not in manifest.notes:
                manifest.notes.append(note)
        manifest.notes.extend(n for n in self.notes if n not in manifest.notes)


def coherence_preflight(
    profile: Profile,
    request: Any,
    manifest: Any = None,
    judges_replies: bool = True,
    echo: Callable[[str], None] = print,
    references_dir: Path | None = None,
) -> CoherencePreflight:
    """The sweep's coherence preflight: `request` is a SweepRequest (allow_incoherent,
    coherence_against), `manifest` the resumed run's RunManifest (its override is kept).

    Raises MissingReference when nothing could judge the arm, unless --allow-incoherent (then
    a warning note). An engine that emits no real tokens (`judges_replies` False: the
    simulated one) has nothing to judge: nothing is required.
    """
    against = request.coherence_against or getattr(manifest, "coherence_against", None)
    if profile.coherence is None:
        if against is not None:
            raise ConfigError(
                f"--coherence-against {against}: profile {profile.name} has no coherence: block"
            )
        return CoherencePreflight(None, None)
    if against is not None and "/" in against and not Path(against).expanduser().exists():
        raise ConfigError(f"--coherence-against {against}: no such run directory")
    if against is not None and is_run_dir(against):
        against = str(Path(against).expanduser().resolve())
    plan = plan_check(profile, against=against, references_dir=references_dir)
    result = CoherencePreflight(plan, against)
    problem = reference_problem(plan) if judges_replies else None
    if problem is None:
        return result
    if not request.allow_incoherent:
        raise MissingReference(missing_reference_message(profile, plan, problem))
    result.notes.append(missing_reference_message(profile, plan, problem, allowed=True))
    echo(f"warning: coherence: {result.notes[-1]}")
    return result
