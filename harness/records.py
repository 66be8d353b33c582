"""Whether a run's records hold what they promise: the reader side of "a record is complete only
when its contents are".

A run directory whose manifest says ``complete`` promises every point of ``planned_points``
(each a ``points/<point_id>/point.json``). A run is *damaged* when it does not hold that
promise, or when its records contradict each other or their folders:

- a ``complete`` manifest with fewer finished points than it plans (a writer interrupted
  between the manifest and its points);
- a point whose ``point_id`` is not its folder's name, or not a safe name (a reader following
  it would leave the run: ``points/../../x``);
- two point records with one ``point_id``, or with one (parallel, number, repeat) (they would
  be counted as extra repeats).

:func:`run_damage` lists the problems (empty: sound); `runs list` shows such a run as damaged,
and neither `history accept` nor `regress` takes it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from harness.names import is_name
from harness.results import Run, RunLayout, point_id


def run_damage(run: Run) -> list[str]:
    """Every way the run's records contradict themselves (see the module docstring)."""
    problems = []
    layout = RunLayout(run.root)
    ids = Counter(p.point_id for p in run.points)
    for pid, count in sorted(ids.items()):
        if not is_name(pid):
            problems.append(f"point_id {pid!r} is not a safe name")
        elif not layout.point_json(pid).is_file():
            problems.append(f"point_id {pid!r} is not the name of its folder")
        if count > 1:
            problems.append(f"point_id {pid!r} recorded {count} times")
    keys = Counter((p.parallel, p.number, p.repeat) for p in run.points)
    problems += [
        f"point ({par}, {num}) repeat {rep} recorded {count} times"
        for (par, num, rep), count in sorted(keys.items())
        if count > 1 and ids[point_id(par, num, rep)] <= 1
    ]
    if not is_name(run.manifest.run_id):
        problems.append(f"run_id {run.manifest.run_id!r} is not a safe name")
    problems += promise_problems(run.manifest.model_dump(mode="json"), list(ids))
    return problems


def promise_problems(manifest_data: dict[str, Any], finished_ids: list[str]) -> list[str]:
    """A ``complete`` manifest whose planned points are not all among ``finished_ids``."""
    if manifest_data.get("status") != "complete":
        return []
    planned = [str(p) for p in manifest_data.get("planned_points") or []]
    done = set(finished_ids)
    missing = [p for p in planned if p not in done]
    if not missing:
        return []
    more = ", ..." if len(missing) > 5 else ""
    return [
        f"manifest says complete but {len(planned) - len(missing)} of {len(planned)} planned "
        + f"points finished (missing {', '.join(missing[:5])}{more})"
    ]


def row_ids(rows: list[dict[str, Any]]) -> list[str]:
    """The point ids of :func:`harness.analysis.groups.point_rows`-shaped rows."""
    return [point_id(int(r["parallel"]), int(r["number"]), int(r["repeat"])) for r in rows]
