"""The order of a nightly's arms: an arm whose coherence reference has no recorded replies, but
runs tonight, runs after it and is judged against that run's replies (issue 14).

An arm whose reference is recorded (`launch/coherence/references/<arm>/<probe set>.json`) is
judged against the file, whether or not the reference arm runs tonight. A reference that is
neither recorded nor among the arms, or a cycle of unrecorded references, is an error before
the build.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.coherence.check import plan_check
from harness.coherence.references import reference_problem
from harness.errors import ConfigError
from harness.serve.profiles import load_profile


@dataclass(frozen=True)
class ArmOrder:
    """One arm in run order. `after`: the arm (as given) whose run of tonight judges it."""

    arm: str  # as given to --profiles
    name: str  # the profile's name
    after: str | None = None
    reference: str | None = None  # the profile's coherence reference (None: none / no block)
    level: int = 0  # 0: needs no run of tonight; n: after an arm of level n - 1
    checked: bool = True  # False: the profile has no coherence: block


_Need = tuple[str, str | None, str | None, bool]


def _needs(
    arms: Sequence[str], overrides: Sequence[str], references_dir: Path | None
) -> dict[str, _Need]:
    """Per arm: (profile name, its reference, tonight's arm it waits for or None, checked)."""
    names = {arm: load_profile(arm, overrides).name for arm in arms}
    by_name = {name: arm for arm, name in names.items()}
    needs: dict[str, _Need] = {}
    for arm in arms:
        profile = load_profile(arm, overrides)
        if profile.coherence is None:
            needs[arm] = (names[arm], None, None, False)
            continue
        plan = plan_check(profile, references_dir=references_dir)
        ref = plan.reference
        problem = reference_problem(plan)
        if problem is None:
            needs[arm] = (names[arm], ref, None, True)
        elif ref in by_name:
            needs[arm] = (names[arm], ref, by_name[ref], True)
        else:
            raise ConfigError(
                f"nightly arm {names[arm]}: its coherence reference {ref} has no recorded replies "
                f"for probe set {plan.probe_set.key} ({plan.reference_file}) and is not among "
                f"the arms; add {ref} to --profiles (it runs first and judges {names[arm]}), or "
                f"record it: `repro coherence --profile {ref} --record`"
            )
    return needs


def order_arms(
    arms: Sequence[str], overrides: Sequence[str] = (), references_dir: Path | None = None
) -> list[ArmOrder]:
    """The arms in a valid run order: by level, then as given (no dependency: as given)."""
    needs = _needs(arms, overrides, references_dir)
    levels: dict[str, int] = {}

    def level(arm: str, path: tuple[str, ...]) -> int:
        if arm in levels:
            return levels[arm]
        if arm in path:
            cycle = " -> ".join(needs[a][0] for a in (*path[path.index(arm) :], arm))
            raise ConfigError(
                f"nightly arms {needs[path[-1]][0]} and {needs[arm][0]}: coherence references "
                f"form a cycle with no recorded replies ({cycle}); record one of them "
                f"(`repro coherence --profile {needs[arm][0]} --record`)"
            )
        after = needs[arm][2]
        levels[arm] = 0 if after is None else level(after, (*path, arm)) + 1
        return levels[arm]

    for arm in arms:
        level(arm, ())
    ordered = sorted(arms, key=lambda a: (levels[a], list(arms).index(a)))
    return [
        ArmOrder(a, needs[a][0], needs[a][2], needs[a][1], levels[a], needs[a][3]) for a in ordered
    ]


def reference_note(entry: ArmOrder, run_dirs: dict[str, Path]) -> str:
    """Which reference the arm's outputs were judged against, for the summary."""
    if not entry.checked:
        return "coherence: not checked (the profile has no coherence: block)"
    if entry.after is not None:
        run = run_dirs[entry.after].name
        return f"coherence judged against tonight's {entry.reference} run ({run})"
    if entry.reference is not None:
        return f"coherence judged against the recorded {entry.reference} replies"
    return "coherence: a reference arm (no agreement judged; garbage, answers, acceptance)"
