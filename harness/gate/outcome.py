"""Outcome claims: what became of a run as a whole (harness.gate.claims' `outcome:` form).

* served: the run is complete, every planned point finished and is valid, and every request
  of every point succeeded (optionally with a mean prompt of at least `min_prompt_tokens`,
  so that a run on a smaller workload cannot stand in for the claimed one);
* refused: the server exited before it was ready, the run recorded why (`start_failure`,
  written by the sweep and by `repro simulate`), no point ran, and the reason contains the
  claimed text (e.g. vLLM's "To serve at least one request with the model's max seq len").
"""

from __future__ import annotations

from typing import Literal

from harness.results import Run, RunManifest

Status = Literal["holds", "fails"]


def served(run: Run, min_prompt_tokens: int | None) -> tuple[Status, str]:
    man = run.manifest
    problems: list[str] = []
    if man.start_failure:
        problems.append(f"refused at {man.start_failure.get('stage')}: {_reason(man)}")
    if man.status != "complete":
        problems.append(f"run status {man.status}")
    done = {p.point_id for p in run.points}
    missing = [pid for pid in man.planned_points if pid not in done]
    if missing:
        problems.append(f"points not run: {', '.join(missing)}")
    if not run.points:
        problems.append("no point ran")
    parts = []
    for point in run.points:
        c = point.client
        bad = []
        if not point.valid:
            bad.append("invalid (" + "; ".join(point.invalid_reasons) + ")")
        if c is None:
            # A point whose client never wrote a summary served nothing the claim can count.
            text = f"{point.label}: no client summary"
            bad.append("has no client summary")
        else:
            text = f"{point.label}: {c.success_requests}/{c.total_requests} requests succeeded"
            if c.avg_input_tokens is not None:
                text += f", mean prompt {c.avg_input_tokens:,.0f} tokens"
            if c.failed_requests or not c.total_requests or c.success_requests != c.total_requests:
                bad.append("not every request succeeded")
            if min_prompt_tokens is not None and (c.avg_input_tokens or 0) < min_prompt_tokens:
                bad.append(f"mean prompt below {min_prompt_tokens:,}")
        parts.append(text + ("  <-- " + ", ".join(bad) if bad else ""))
        problems += [f"{point.label} {b}" for b in bad]
    detail = "; ".join(parts) or "no points"
    if problems:
        return "fails", f"{detail} ({'; '.join(dict.fromkeys(problems))})"
    return "holds", f"run complete; {detail}"


def refused(run: Run, reason: str | None) -> tuple[Status, str]:
    man = run.manifest
    failure = man.start_failure
    if not failure:
        started = f"{len(run.points)} points ran" if run.points else "no start failure recorded"
        return "fails", f"run status {man.status}, {started}: the server was not refused"
    why = _reason(man)
    where = f"refused at {failure.get('stage')} (exit code {failure.get('exit_code')}): {why}"
    if failure.get("stage") != "startup" or run.points:
        return "fails", f"{where}; but {len(run.points)} points ran first"
    if reason is not None and reason not in why:
        return "fails", f"{where}  <-- the reason does not contain {reason!r}"
    return "holds", where


def _reason(man: RunManifest) -> str:
    return str((man.start_failure or {}).get("reason") or "no reason recorded")
