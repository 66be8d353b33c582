"""`repro regress` end to end: load the candidate, pick its policy, fetch the baselines (a run
directory or the history's accepted runs) and hand them to the verdict
(:func:`harness.gate.regress.evaluate`, which never opens the store itself)."""

from __future__ import annotations

from pathlib import Path

from harness.errors import ReproError
from harness.gate.history import History, history_key
from harness.gate.policy import choose_regression_policy
from harness.gate.regress import IncomparableError, Verdict, evaluate, view_from_run
from harness.results import load_run


def regress(
    candidate_dir: Path | str,
    *,
    baseline_dir: Path | str | None = None,
    history_key: str | None = None,
    policy_path: Path | str | None = None,
    history_path: Path | str | None = None,
) -> Verdict:
    """`repro regress`: against a baseline run, or the history (``history_key`` or, if neither
    is given, the candidate's own key: ``auto``)."""
    candidate = load_run(candidate_dir)
    policy = choose_regression_policy(candidate, policy_path)
    cand_view = view_from_run(candidate)
    if baseline_dir is not None:
        if history_key is not None:
            raise ReproError("give --baseline or --history, not both")
        base_view = view_from_run(load_run(baseline_dir))
        return evaluate(cand_view, [base_view], policy)
    history = History.open(history_path)
    key = _key_of(candidate.manifest.model_dump(mode="json"))
    if history_key not in (None, "auto"):
        key = history_key
    entries = history.baseline(key, policy.baseline_runs, exclude_run_dir=candidate.root)
    if not entries:
        raise IncomparableError(
            f"{history.path}: no accepted run with key {key!r} to compare with "
            "(record one with `repro history accept RUN`)"
        )
    label = f"history {key} (median of {len(entries)} accepted run(s))"
    return evaluate(cand_view, [e.view() for e in entries], policy, baseline_label=label)


_key_of = history_key  # the parameter of the same name shadows it inside regress()
