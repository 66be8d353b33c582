"""The dashboard's tables: derived metrics per point and per curve side by side (ratio against
the baseline run), each run's provenance panel, and per arm the highest concurrency meeting
the latency objectives."""

from __future__ import annotations

import datetime as dt
import json
import shlex
import statistics
from collections.abc import Sequence
from typing import Any

from harness.analysis.compare import CURVE_METRICS, compare_curves, compare_runs, curve_values
from harness.analysis.goodput import ATTAINMENT_THRESHOLD, meeting_slo, table_metrics
from harness.analysis.groups import SeriesPoint, group_by_point
from harness.analysis.point_table import point_table
from harness.analysis.slo import Objectives
from harness.coherence import coherence_line
from harness.report.figures import run_series
from harness.results import METRICS, PointRecord, Run
from harness.run.config import configured_objectives, configured_sweep
from harness.text import fmt_number


def _metric_row(metric: str, spec: Any, cells: list[dict[str, Any]]) -> dict[str, Any]:
    """One table row: the metric as METRICS describes it, and its cells."""
    return {
        "metric": metric,
        "label": spec.label,
        "unit": spec.unit,
        "better": spec.better or "",
        "description": spec.description,
        "cells": cells,
    }


# --------------------------------------------------------------------------- tables


def fmt_cell(value: float | None) -> str:
    """A dashboard cell: three significant digits, whole numbers from 100, en dash if none."""
    return fmt_number(
        value, digits=3, missing="–", sci_below=1e-3, sci_from=1e5, whole_from=100, thousands=True
    )


def _cell(point: SeriesPoint | None, key: str) -> dict[str, Any]:
    if point is None:
        return {"text": "not run", "ci": "", "invalid": False}
    value = point.values.get(key)
    bounds = point.ci.get(key)
    return {
        "text": fmt_cell(value),
        "invalid": not point.valid,
        "ci": f"[{fmt_cell(bounds[0])}, {fmt_cell(bounds[1])}]" if bounds else "",
    }


def point_tables(runs: Sequence[Run], baseline_index: int) -> list[dict[str, Any]]:
    """Per configured point: rows of metrics, one value column per run, ratio vs baseline."""
    series = run_series(runs)
    by_key = [{(p.parallel, p.number): p for p in s.points} for s in series]
    baseline = runs[baseline_index]
    verdicts: list[dict[tuple[int, int, str], dict[str, Any]]] = []
    for i, run in enumerate(runs):
        table: dict[tuple[int, int, str], dict[str, Any]] = {}
        if i != baseline_index:
            for row in compare_runs(baseline, run):
                table[(row["parallel"], row["number"], row["metric"])] = row
        verdicts.append(table)
    keys = sorted({key for mapping in by_key for key in mapping})
    tables = []
    for parallel, number in keys:
        points = [mapping.get((parallel, number)) for mapping in by_key]
        label = next(p.label for p in points if p is not None)
        rows = []
        for metric, spec in METRICS.items():
            if all(p is None or p.values.get(metric) is None for p in points):
                continue
            cells = []
            for i, point in enumerate(points):
                cell = _cell(point, metric)
                if i != baseline_index:
                    row = verdicts[i].get((parallel, number, metric), {})
                    ratio = row.get("ratio")
                    cell["ratio"] = "–" if ratio is None else f"{ratio:.3f}×"
                    cell["verdict"] = row.get("verdict", "n/a")
                cells.append(cell)
            rows.append(_metric_row(metric, spec, cells))
        invalid = [
            (s.name, p.invalid_reasons)
            for s, p in zip(series, points, strict=True)
            if p is not None and not p.valid
        ]
        tables.append(
            {
                "title": f"{label} — parallel {parallel}, {number} conversations",
                "label": label,
                "parallel": parallel,
                "number": number,
                "rows": rows,
                "invalid": invalid,
                "repeats": [p.repeats if p else 0 for p in points],
            }
        )
    return tables


def curve_table(runs: Sequence[Run], baseline_index: int) -> dict[str, Any]:
    """Whole-curve scalars (frontier AUC, best throughput, most running) in the table layout."""
    values = [curve_values(run) for run in runs]
    baseline = runs[baseline_index]
    against = [
        {row["metric"]: row for row in compare_curves(baseline, run)} if i != baseline_index else {}
        for i, run in enumerate(runs)
    ]
    rows = []
    for metric, spec in CURVE_METRICS.items():
        if all(v[metric] is None for v in values):
            continue
        cells = []
        for i, v in enumerate(values):
            cell = {"text": fmt_cell(v[metric]), "ci": "", "invalid": False}
            if i != baseline_index:
                ratio = against[i][metric]["ratio"]
                cell["ratio"] = "–" if ratio is None else f"{ratio:.3f}×"
                cell["verdict"] = against[i][metric]["verdict"]
            cells.append(cell)
        rows.append(_metric_row(metric, spec, cells))
    return {
        "title": "Whole curve (valid points, repeats reduced to medians)",
        "label": "curve",
        "rows": rows,
        "invalid": [],
        "repeats": [0] * len(runs),
    }


def when(epoch: float | None) -> str:
    if epoch is None:
        return "–"
    try:  # a hand-made record may hold NaN or a year beyond 9999: shown, never a traceback
        return dt.datetime.fromtimestamp(epoch, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (ValueError, OverflowError, OSError):
        return f"invalid time {epoch!r}"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str) if value else "–"


def _scale(m: Any) -> str:
    """The simulated engine's time scale: client times were multiplied back by it."""
    k = getattr(m, "time_scale", None)
    return f" (simulated, time scale K={k:g}; client times x K)" if k else ""


def provenance(run: Run) -> list[tuple[str, str, bool]]:
    """(key, text, preformatted) rows of the provenance panel."""
    m = run.manifest
    dataset = m.dataset or {}
    client = m.client or {}
    return [
        ("run id", m.run_id, False),
        ("directory", str(run.root), False),
        ("status", m.status, False),
        ("created / finished", f"{when(m.created_at)} / {when(m.finished_at)}", False),
        ("profile", m.profile_name, False),
        ("engine / URL", f"{m.engine}{_scale(m)} · {m.base_url}", False),
        ("serve command", shlex.join(m.serve_command) if m.serve_command else "– (attached)", True),
        ("overrides", " ".join(m.overrides) or "–", True),
        ("build", _pretty(m.build), True),
        ("dataset", f"{dataset.get('path', '–')}\nsha256 {dataset.get('sha256', '–')}", True),
        (
            "dataset details",
            _pretty({k: v for k, v in dataset.items() if k not in {"path", "sha256"}}),
            True,
        ),
        ("coherence", coherence_line(m.coherence), False),
        ("configuration key", m.configuration_key, False),
        ("client", f"{client.get('name', '?')} {client.get('version', '?')}", False),
        ("client command", _pretty(client.get("command") or client.get("command_template")), True),
        ("sweep", _pretty(configured_sweep(run)), True),
        ("GPUs (per-GPU divisor)", str(m.gpus), False),
        ("host", _pretty(m.host), True),
        ("launch", _pretty(m.launch), True),
        ("harness version", m.harness_version, False),
        ("notes", "\n".join(m.notes) or "–", True),
    ]


# --------------------------------------------------------------------------- objectives


def _under(run: Run, point: PointRecord, objectives: Objectives | None) -> PointRecord:
    """The point with `slo_attainment` and `goodput_rps` under `objectives`, recomputed from
    its per-request table (None without one); as recorded when `objectives` is None."""
    if objectives is None:
        return point
    table = point_table(run.root, point.point_id)
    extra = table_metrics(table, objectives) if table is not None else {}
    metrics = dict(point.metrics)
    metrics["slo_attainment"] = extra.get("slo_attainment")
    metrics["goodput_rps"] = extra.get("goodput_rps")
    return point.model_copy(update={"metrics": metrics})


def _share(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def _median(points: Sequence[PointRecord], key: str) -> float | None:
    values = [float(v) for p in points if p.valid and (v := p.metrics.get(key)) is not None]
    return statistics.median(values) if values else None


def slo_rows(runs: Sequence[Run], objectives: Objectives | None = None) -> list[dict[str, Any]]:
    """Per run (arm): the objectives (`objectives`, else the run's `sweep.slo`), each point's
    attainment and goodput (median over valid repeats) and the highest concurrency whose
    attainment is at least ATTAINMENT_THRESHOLD (the rule of `claims check`'s ``point: slo``).
    Runs without objectives are left out."""
    rows = []
    for run in runs:
        recorded = configured_objectives(run)
        if objectives is None and not recorded:
            continue
        text = objectives.text() if objectives is not None else str(recorded)
        groups = [
            [_under(run, p, objectives) for p in group]
            for group in group_by_point(run.points).values()
        ]
        meeting = meeting_slo(groups)
        best = meeting[-1:]
        met = {(g[0].parallel, g[0].number) for g in meeting}
        rows.append(
            {
                "run": run.name,
                "profile": run.manifest.profile_name,
                "objectives": text,
                "source": "--slo" if objectives is not None else "sweep.slo",
                "best": f"c{best[0][0].parallel}" if best else "none",
                "best_parallel": best[0][0].parallel if best else None,
                "points": [
                    {
                        "label": g[0].label,
                        "parallel": g[0].parallel,
                        "attainment": _share(_median(g, "slo_attainment")),
                        "goodput": fmt_cell(_median(g, "goodput_rps")),
                        "meets": (g[0].parallel, g[0].number) in met,
                    }
                    for g in groups
                ],
            }
        )
    return rows


def slo_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """One line per arm, for a terminal."""
    pct = f"{ATTAINMENT_THRESHOLD:.0%}"
    return [
        f"{r['run']} ({r['profile']}): highest concurrency meeting {r['objectives']} for >= "
        f"{pct} of requests: {r['best']}"
        for r in rows
    ]
