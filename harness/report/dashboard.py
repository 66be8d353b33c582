"""One standalone, offline HTML report for one or more runs (`repro report`).

The file embeds plotly.js once, inline, and loads nothing else: no CDN, no fonts, no images, so it
opens from a PR artifact or an air-gapped laptop. Sections:

1. the blog-definition figure (published MTP3 values overlaid, labelled "published") and the
   vLLM bench-sweep-definition figure; the per-turn figures; the think-time study figure when
   the runs vary think time (harness/report/think_time.py);
2. invalid points, flagged with their reasons;
3. per arm, when objectives are given (`--slo`) or named by the workload (`sweep.slo`): the
   attainment and goodput of every point and the highest concurrency meeting them for >= 90 %
   of requests;
4. per-point tables of every derived metric (`harness.results.METRICS`) side by side, with a
   ratio column against the baseline (better/worse by the metric's direction);
5. per-point time series of the scraped metrics (running, waiting, KV usage, preemptions, MTP
   acceptance) from each point's samples.csv;
6. provenance: serve command, build, dataset checksum, client, overrides, host;
7. the published reference values, with their source and uncertainty.

The page is `templates/dashboard.html.jinja` (with its CSS and JS beside it); the sections'
data come from `harness.report.tables` and `harness.report.timeseries`.

Every user-controlled string (run ids, profile names, commands) goes through Jinja's autoescape
in HTML and through JSON with <, > and & escaped inside scripts.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jinja2
from plotly.offline import get_plotlyjs

from harness import __version__
from harness.analysis.compare import DEFAULT_TOLERANCE
from harness.analysis.goodput import ATTAINMENT_THRESHOLD
from harness.analysis.slo import Objectives
from harness.capacity.figures import capacity_figures
from harness.errors import ReproError, RunError
from harness.identity import workload_id, workload_identity
from harness.paths import dashboards_dir, results_dir
from harness.report.figures import Series, figure_title, load_published, pareto_figure, run_series
from harness.report.per_turn import per_turn_figures
from harness.report.predicted import predicted_tables
from harness.report.series import simulated_label
from harness.report.tables import (
    curve_table,
    fmt_cell,
    point_tables,
    provenance,
    slo_rows,
    when,
)
from harness.report.think_time import CAPTION as THINK_TIME_CAPTION
from harness.report.think_time import think_time_figure
from harness.report.timeseries import timeseries_figures
from harness.results import UNCALIBRATED, Run, atomic_write_text, load_run

TEMPLATES = Path(__file__).with_name("templates")
_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
)

FIGURE_CAPTIONS = (
    (
        "blog",
        (
            "Blog definition (InferenceX): interactivity = 1000 / mean TPOT; total-token "
            "throughput per GPU includes prefix-cached prompt tokens. Faint line: sweep "
            "order; bold line: Pareto frontier. Dotted/hollow: published values."
        ),
    ),
    (
        "bench-sweep",
        (
            "vLLM bench sweep definition: output tok/s per user (output throughput "
            "÷ configured concurrency) vs output-token throughput per GPU."
        ),
    ),
)


def _script_json(value: Any) -> str:
    """JSON safe inside <script>: no '</script>' or '<!--' can appear."""
    text = value if isinstance(value, str) else json.dumps(value)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _embedded(fig_id: str, caption: str, fig: Any) -> dict[str, str]:
    return {"id": fig_id, "caption": caption, "json": _script_json(fig.to_json())}


def capacity_section(
    runs: Sequence[Run], names: Sequence[str], first_index: int
) -> tuple[list[dict[str, str]], list[str]]:
    """Capacity-model figures per run (embedded), or the reason a run has none."""
    figures: list[dict[str, str]] = []
    notes: list[str] = []
    for run, name in zip(runs, names, strict=True):
        try:
            made = capacity_figures(run=run)
        except ReproError as exc:
            notes.append(f"{name}: no capacity figure ({exc})")
            continue
        except Exception as exc:  # noqa: BLE001 (a broken panel must not cost the whole report)
            notes.append(f"{name}: capacity model failed ({type(exc).__name__}: {exc})")
            continue
        for fig in made:
            figures.append(_embedded(f"figure-{first_index + len(figures)}", name, fig))
    return figures, notes


def invalid_section(series: Sequence[Series]) -> list[dict[str, str]]:
    """Invalid points, then valid points with invalid repeats left out of their median."""
    invalid = [
        {"run": s.name, "point": p.label, "reasons": "; ".join(p.invalid_reasons)}
        for s in series
        for p in s.points
        if not p.valid
    ]
    return invalid + [
        {
            "run": s.name,
            "point": p.label,
            "reasons": "left out of the median (other repeats valid): " + "; ".join(p.excluded),
        }
        for s in series
        for p in s.points
        if p.excluded
    ]


def published_section() -> dict[str, Any]:
    """The published reference values with their source and uncertainty."""
    data, published_series = load_published()
    unc = data.get("uncertainty", {})
    source = data.get("source", {})

    def occupancy(value: float | None) -> str:
        return "–" if value is None else f"{value:.1f}"

    return {
        "title": data.get("title", ""),
        "workload": data.get("workload", ""),
        "post": source.get("post", ""),
        "method": source.get("method", ""),
        "unc_xy": f"{100 * float(unc.get('interactivity', 0)):.1f}%",
        "series": [
            {
                "name": s.name,
                "build": s.build or "?",
                "points": [
                    {
                        "label": p.label,
                        "x": fmt_cell(p.values.get("interactivity")),
                        "y": fmt_cell(p.values.get("throughput_per_gpu")),
                        "occ": occupancy(p.values.get("occupancy")),
                    }
                    for p in s.points
                ],
            }
            for s in published_series
        ],
    }


def run_workload_id(run: Run) -> str:
    """What the run's client replayed (harness.identity.workload_identity), hashed."""
    return workload_id(workload_identity(run.manifest.model_dump(mode="json")))


def simulated_text(run: Run) -> str:
    """How the header names a simulated run's step cost: its calibration, or uncalibrated
    (the roofline defaults); empty for a real run."""
    if not run.manifest.simulated:
        return ""
    calibration = run.manifest.calibration
    label = simulated_label(calibration)
    return f"{label} (roofline defaults)" if calibration == UNCALIBRATED else label


def _run_rows(runs: Sequence[Run], series: Sequence[Series]) -> list[dict[str, Any]]:
    return [
        {
            "name": s.name,
            "profile": run.manifest.profile_name,
            "status": run.manifest.status,
            "points": len(s.points),
            "invalid": sum(not p.valid for p in s.points),
            "workload": run_workload_id(run),
            "engine": simulated_text(run),
            "provenance": provenance(run),
        }
        for run, s in zip(runs, series, strict=True)
    ]


def render_report(
    runs: Sequence[Run],
    *,
    baseline_index: int = 0,
    title: str | None = None,
    predicted: Sequence[Run] = (),
    objectives: Objectives | None = None,
) -> str:
    """The report's HTML text for loaded runs (runs[baseline_index] is the baseline).

    `predicted` simulated runs are overlaid on every figure and table (labelled simulated) and
    each gets a predicted-beside-measured table against the real run it predicts.
    `objectives` (`repro report --slo`): each run's attainment, goodput and highest concurrency
    meeting them, recomputed from the per-request tables; without, runs whose workload names
    objectives (`sweep.slo`) show them as recorded.
    """
    if not runs:
        raise RunError("report: no runs given")
    prediction = predicted_tables(runs, predicted)
    runs = [*runs, *predicted]
    published = published_section()
    figures = [
        _embedded(f"figure-{index}", caption, pareto_figure(runs, definition=definition))
        for index, (definition, caption) in enumerate(FIGURE_CAPTIONS)
    ]
    series = run_series(runs)
    capacity, capacity_notes = capacity_section(runs, [s.name for s in series], len(figures))
    # per-request tables: TTFT / prefix hit by turn, TTFT CDF, KV transfer (report/per_turn.py)
    figures += [_embedded(f"per-turn-{i}", c, f) for i, c, f in per_turn_figures(runs)]
    study = think_time_figure(runs)  # runs that vary think time (report/think_time.py)
    if study is not None:
        figures.append(_embedded("think-time-study", THINK_TIME_CAPTION, study))
    timeseries = [
        _embedded(f"timeseries-{index}", caption, fig)
        for index, caption, fig in timeseries_figures(runs, series)
    ]
    return _ENV.get_template("dashboard.html.jinja").render(
        title=title or f"repro report · {figure_title(runs)}",
        version=__version__,
        generated=when(dt.datetime.now(tz=dt.UTC).timestamp()),
        plotlyjs=get_plotlyjs(),
        runs=_run_rows(runs, series),
        baseline=baseline_index,
        tolerance=f"{DEFAULT_TOLERANCE:.0%}",
        # The configuration key: a report warns when the runs are not repeats of one experiment.
        # the workload identity, not the configuration key: arms differ in serve flags by design
        comparable=len({run_workload_id(run) for run in runs}) <= 1,
        invalid=invalid_section(series),
        figures=figures,
        capacity=capacity,
        capacity_notes=capacity_notes,
        predicted=prediction,
        tables=[curve_table(runs, baseline_index), *point_tables(runs, baseline_index)],
        slo=slo_rows(runs, objectives),
        slo_threshold=f"{ATTAINMENT_THRESHOLD:.0%}",
        timeseries=timeseries,
        published=published,
    )


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "run"


def default_report_path(runs: Sequence[Run]) -> Path:
    names = "-vs-".join(_safe_name(run.name) for run in runs[:3])
    if len(runs) > 3:
        names += f"-and-{len(runs) - 3}-more"
    return dashboards_dir() / f"{names}.html"


def write_report(
    run_dirs: Sequence[Path],
    *,
    baseline: Path | None = None,
    out: Path | None = None,
    title: str | None = None,
    predicted: Sequence[Path] = (),
    objectives: Objectives | None = None,
) -> Path:
    """Write the standalone HTML report; returns its path (default: dashboards_dir()).

    `predicted`: simulated runs overlaid on the real ones (`repro report RUN --predicted SIM`).
    `objectives`: `repro report --slo` (see `render_report`).

    The baseline (default: the first run) is shown first and is the denominator of every ratio.
    A baseline not among `run_dirs` is added to the report.
    """
    dirs = [Path(d) for d in run_dirs]
    if baseline is not None:
        baseline = Path(baseline)
        resolved = [d.resolve() for d in dirs]
        if baseline.resolve() in resolved:
            dirs.pop(resolved.index(baseline.resolve()))
        dirs.insert(0, baseline)
    if not dirs:
        raise RunError("report: give at least one run directory")
    runs = [load_run(d) for d in dirs]
    sims = [load_run(d) for d in predicted]
    html_text = render_report(
        runs, baseline_index=0, title=title, predicted=sims, objectives=objectives
    )
    path = Path(out) if out else default_report_path(runs)
    if path.suffix.lower() not in {".html", ".htm"}:
        raise RunError(f"{path}: the report is HTML; give --out a .html file name")
    atomic_write_text(path, html_text)
    path.chmod(0o644)  # a report is meant to be shared, whatever the umask
    return path


def resolve_run_dir(spec: str | Path) -> Path:
    """A run given as a directory, or as a run id under results_dir()."""
    path = Path(spec).expanduser()
    if (path / "manifest.json").is_file():
        return path
    candidate = results_dir() / str(spec)
    if (candidate / "manifest.json").is_file():
        return candidate
    raise RunError(f"{spec}: not a run directory (no manifest.json there or under {results_dir()})")
