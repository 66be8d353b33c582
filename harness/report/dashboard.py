"""One standalone, offline HTML report for one or more runs (`repro report`).

The file embeds plotly.js once, inline, and loads nothing else: no CDN, no fonts, no images, so it
opens from a PR artifact or an air-gapped laptop. Sections:

1. the blog-definition figure (published MTP3 values overlaid, labelled "published") and the
   vLLM bench-sweep-definition figure;
2. invalid points, flagged with their reasons;
3. per-point tables of every derived metric (`harness.results.METRICS`) side by side, with a
   ratio column against the baseline (better/worse by the metric's direction);
4. per-point time series of the scraped metrics (running, waiting, KV usage, preemptions, MTP
   acceptance) from each point's samples.csv;
5. provenance: serve command, build, dataset checksum, client, overrides, host;
6. the published reference values, with their source and uncertainty.

Every user-controlled string (run ids, profile names, commands) goes through Jinja's autoescape
in HTML and through JSON with <, > and & escaped inside scripts.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import re
import shlex
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jinja2
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from harness import __version__
from harness.analysis.compare import (
    CURVE_METRICS,
    DEFAULT_TOLERANCE,
    compare_curves,
    compare_runs,
    curve_values,
)
from harness.client.scrape import Sample, read_samples_csv
from harness.errors import ReproError, RunError
from harness.paths import dashboards_dir
from harness.report.figures import (
    STYLES,
    SeriesPoint,
    figure_title,
    load_published,
    pareto_figure,
    run_series,
)
from harness.results import METRICS, Run, RunLayout, load_run

# Scraped series shown per point: (title, sample name, how to fold engines / counters).
TIMESERIES: tuple[tuple[str, str, str], ...] = (
    ("Requests running", "vllm:num_requests_running", "sum"),
    ("Requests waiting", "vllm:num_requests_waiting", "sum"),
    ("KV-cache usage (fraction)", "vllm:kv_cache_usage_perc", "max"),
    ("Preemptions (cumulative in point)", "vllm:num_preemptions_total", "counter"),
    ("MTP acceptance length (per scrape interval)", "acceptance", "acceptance"),
)


# --------------------------------------------------------------------------- time series

SCRAPED_NAMES = frozenset(
    {
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total",
        "vllm:num_preemptions",
        "vllm:spec_decode_num_accepted_tokens_total",
        "vllm:spec_decode_num_accepted_tokens",
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_drafts",
    }
)


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


def read_scraped(path: Path) -> list[Sample]:
    """The samples.csv rows the panels need (a GPU point holds ~400 series per scrape: reading
    only these names keeps a report of a 3-hour sweep quick)."""
    return read_samples_csv(path, SCRAPED_NAMES)


def _gauge(samples: list[Sample], name: str, fold: str) -> tuple[list[float], list[float]]:
    by_time: dict[float, list[float]] = defaultdict(list)
    for s in samples:
        if s.name == name:
            by_time[s.timestamp].append(s.value)
    times = sorted(by_time)
    combine = max if fold == "max" else sum
    return times, [float(combine(by_time[t])) for t in times]


def _counter(samples: list[Sample], name: str) -> tuple[list[float], list[float]]:
    """Cumulative increase since the first scrape, summed over series, resets handled."""
    names = {name, name.removesuffix("_total")}
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in samples:
        if s.name in names:
            series[s.name + json.dumps(s.labels, sort_keys=True)].append((s.timestamp, s.value))
    increments: dict[float, float] = defaultdict(float)
    for points in series.values():
        points.sort()
        increments[points[0][0]] += 0.0
        for (_, before), (t, after) in itertools.pairwise(points):
            increments[t] += after - before if after >= before else after
    times = sorted(increments)
    total, values = 0.0, []
    for t in times:
        total += increments[t]
        values.append(total)
    return times, values


def _acceptance(samples: list[Sample]) -> tuple[list[float], list[float]]:
    """1 + d(accepted)/d(drafts) per scrape interval, where drafts moved."""
    t_acc, acc = _counter(samples, "vllm:spec_decode_num_accepted_tokens_total")
    t_dr, dr = _counter(samples, "vllm:spec_decode_num_drafts_total")
    accepted, drafts = dict(zip(t_acc, acc, strict=True)), dict(zip(t_dr, dr, strict=True))
    times = sorted(set(accepted) & set(drafts))
    out_t, out_v = [], []
    for before, after in itertools.pairwise(times):
        d_drafts = drafts[after] - drafts[before]
        if d_drafts > 0:
            out_t.append(after)
            out_v.append(1.0 + (accepted[after] - accepted[before]) / d_drafts)
    return out_t, out_v


def timeseries_figure(
    point_label: str, entries: list[tuple[str, int, tuple[float, float], list[Sample]]]
) -> go.Figure:
    """Stacked panels for one configured point; one line per (run, repeat).

    `entries`: (series name, style index, point window (epoch s), samples). Time is seconds
    since the window start (first request), so runs line up; the window is shaded. Panels whose
    metric no run exported (e.g. MTP acceptance without spec decode) are left out and named.
    """
    lines: dict[int, list[tuple[str, int, list[float], list[float]]]] = defaultdict(list)
    for name, style, window, samples in entries:
        for index, (_, metric, fold) in enumerate(TIMESERIES):
            if fold == "acceptance":
                times, values = _acceptance(samples)
            elif fold == "counter":
                times, values = _counter(samples, metric)
            else:
                times, values = _gauge(samples, metric, fold)
            if times:
                lines[index].append((name, style, [t - window[0] for t in times], values))
    shown = sorted(lines) or [0]
    missing = [TIMESERIES[i][0] for i in range(len(TIMESERIES)) if i not in lines]
    fig = make_subplots(
        rows=len(shown),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=[TIMESERIES[i][0] for i in shown],
    )
    for row, index in enumerate(shown, start=1):
        for name, style, xs, ys in lines.get(index, []):
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode="lines+markers",
                    name=name,
                    legendgroup=name,
                    showlegend=row == 1,
                    line={"color": STYLES[style % len(STYLES)][0], "width": 1.5},
                    marker={"size": 4},
                    meta={"series": name, "metric": TIMESERIES[index][1]},
                ),
                row=row,
                col=1,
            )
    longest = max((end - start for _, _, (start, end), _ in entries), default=0.0)
    if longest > 0:
        fig.add_vrect(
            x0=0, x1=longest, fillcolor="#888", opacity=0.08, line_width=0, row="all", col=1
        )
    fig.update_xaxes(showticklabels=True)
    fig.update_xaxes(
        title_text="seconds since the point's first request (shaded: measured window)",
        row=len(shown),
    )
    title = f"{point_label}: /metrics"
    if missing:
        title += (
            f" <span style='font-size:11px;color:#888'>(not exported: {', '.join(missing)})</span>"
        )
    fig.update_layout(
        template="plotly_white",
        height=180 * len(shown) + 90,
        margin={"t": 70, "b": 40},
        title={"text": title},
        legend={"x": 1.01, "y": 1, "xanchor": "left"},
    )
    return fig


# --------------------------------------------------------------------------- tables


def _fmt(value: float | None) -> str:
    if value is None:
        return "–"
    if value == 0:
        return "0"
    if abs(value) >= 1e5 or abs(value) < 1e-3:
        return f"{value:.3e}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _cell(point: SeriesPoint | None, key: str) -> dict[str, Any]:
    if point is None:
        return {"text": "not run", "ci": "", "invalid": False}
    value = point.values.get(key)
    bounds = point.ci.get(key)
    return {
        "text": _fmt(value),
        "invalid": not point.valid,
        "ci": f"[{_fmt(bounds[0])}, {_fmt(bounds[1])}]" if bounds else "",
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
            cell = {"text": _fmt(v[metric]), "ci": "", "invalid": False}
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


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "–"
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


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
        ("created / finished", f"{_when(m.created_at)} / {_when(m.finished_at)}", False),
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
        ("workload key", m.workload_key, False),
        ("client", f"{client.get('name', '?')} {client.get('version', '?')}", False),
        ("client command", _pretty(client.get("command") or client.get("command_template")), True),
        ("sweep", _pretty(m.sweep), True),
        ("GPUs (per-GPU divisor)", str(m.gpus), False),
        ("host", _pretty(m.host), True),
        ("launch", _pretty(m.launch), True),
        ("harness version", m.harness_version, False),
        ("notes", "\n".join(m.notes) or "–", True),
    ]


# --------------------------------------------------------------------------- HTML


def _script_json(value: Any) -> str:
    """JSON safe inside <script>: no '</script>' or '<!--' can appear."""
    text = value if isinstance(value, str) else json.dumps(value)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


TEMPLATE = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined).from_string(
    """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="repro {{ version }}">
<title>{{ title }}</title>
<style>
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1280px;
 padding:16px 24px;color:#1d1d1f;background:#fff}
h1{font-size:1.5em;margin:.2em 0}
h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:1.6em}
table{border-collapse:collapse;font-size:13px;margin:6px 0 14px}
th,td{border:1px solid #e2e2e2;padding:3px 7px;text-align:right;vertical-align:top}
th{background:#f5f5f7}td.k,th.k{text-align:left}
td.better{background:#e3f5e1;color:#14591a}td.worse{background:#fbe3e3;color:#8a1414}
td.same{color:#666}td.invalid,tr.invalid td{background:#fff4d6}
.ci{color:#777;font-size:11px;display:block}
.flag{background:#fff0f0;border:1px solid #e0a0a0;padding:8px 12px;border-radius:4px;margin:8px 0}
.warn{background:#fff8e1;border:1px solid #e6c86e;padding:8px 12px;border-radius:4px;margin:8px 0}
.muted{color:#666;font-size:13px}pre{margin:0;white-space:pre-wrap;word-break:break-all;
 font-size:12px;text-align:left}
.plot{width:100%;min-height:420px}details{margin:6px 0}summary{cursor:pointer;font-weight:600}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:16px}
</style>
<script>{{ plotlyjs|safe }}</script>
</head><body>
<h1>{{ title }}</h1>
<p class="muted">Generated {{ generated }} by repro {{ version }} ·
{{ runs|length }} run{{ 's' if runs|length != 1 }}{% if runs|length > 1 %} · baseline
<b>{{ runs[baseline].name }}</b> (ratios are run ÷ baseline; better/worse by each metric's
direction, “same” within {{ tolerance }}){% endif %}</p>
<ul>{% for run in runs %}<li><b>{{ run.name }}</b> — profile {{ run.profile }},
{{ run.points }} point{{ 's' if run.points != 1 }} ({{ run.invalid }} invalid), status
{{ run.status }}{% if loop.index0 == baseline and runs|length > 1 %} · <i>baseline</i>{% endif
%}</li>{% endfor %}</ul>
{% if not comparable %}<div class="warn">These runs have different workload keys
({% for run in runs %}{{ run.name }}: {{ run.workload_key }}{{ ', ' if not loop.last }}{% endfor
%}): they did not replay the same workload, so ratios compare different experiments.</div>
{% endif %}
{% if invalid %}<div class="flag" id="invalid-points"><b>Invalid points</b> (shown hollow ✗ on the
figure, excluded from lines and frontiers):<ul>{% for item in invalid %}<li>{{ item.run }} ·
{{ item.point }}: {{ item.reasons }}</li>{% endfor %}</ul></div>{% endif %}

<h2 id="figures">Figures</h2>
{% for fig in figures %}<div class="figure"><div id="{{ fig.id }}" class="plot"></div>
<p class="muted">{{ fig.caption }}</p></div>{% endfor %}

<h2 id="capacity">Capacity model</h2>
<p class="muted">The blog's capacity calculator for each run's model and topology, with the
measured occupancy marked (harness.capacity).</p>
{% for note in capacity_notes %}<p class="muted">{{ note }}</p>{% endfor %}
{% for fig in capacity %}<div class="figure"><div id="{{ fig.id }}" class="plot"></div>
<p class="muted">{{ fig.caption }}</p></div>{% endfor %}

<h2 id="metrics">Derived metrics per point</h2>
<p class="muted">Values are medians over valid repeats (95% distribution-free CI in brackets when
a point has repeats). Columns marked ✗ are invalid points.</p>
{% for table in tables %}<details open><summary>{{ table.title }}</summary>
{% for name, reasons in table.invalid %}<div class="flag">{{ name }} · {{ table.label }} invalid:
{{ reasons|join('; ') }}</div>{% endfor %}
<table><thead><tr><th class="k">metric</th><th class="k">unit</th><th>better</th>
{% for run in runs %}<th>{{ run.name }}{% if table.repeats[loop.index0] > 1 %}<br><span class="ci">
{{ table.repeats[loop.index0] }} repeats</span>{% endif %}</th>{% if loop.index0 != baseline %}
<th>÷ {{ runs[baseline].name }}</th>{% endif %}{% endfor %}</tr></thead><tbody>
{% for row in table.rows %}<tr><td class="k" title="{{ row.description }}">{{ row.label }}</td>
<td class="k">{{ row.unit }}</td><td>{{ row.better }}</td>
{% for cell in row.cells %}<td class="{{ 'invalid' if cell.invalid }}">{{ cell.text }}{% if
cell.invalid %} ✗{% endif %}{% if cell.ci %}<span class="ci">{{ cell.ci }}</span>{% endif %}</td>
{% if loop.index0 != baseline %}<td class="{{ cell.verdict }}">{{ cell.ratio }}</td>{% endif %}
{% endfor %}</tr>{% endfor %}</tbody></table></details>{% endfor %}

<h2 id="timeseries">Scraped /metrics per point</h2>
{% if not timeseries %}<p class="muted">No samples.csv in these runs.</p>{% endif %}
{% for fig in timeseries %}<details{% if loop.first %} open{% endif %}><summary>{{ fig.caption }}
</summary><div id="{{ fig.id }}" class="plot"></div></details>{% endfor %}

<h2 id="provenance">Provenance</h2>
<div class="grid">{% for run in runs %}<div><h3>{{ run.name }}</h3><table>
{% for key, text, pre in run.provenance %}<tr><th class="k">{{ key }}</th><td class="k">{% if pre
%}<pre>{{ text }}</pre>{% else %}{{ text }}{% endif %}</td></tr>{% endfor %}</table></div>
{% endfor %}</div>

<h2 id="published">Published reference values</h2>
<p class="muted">{{ published.title }} — {{ published.workload }}. Source: {{ published.post }};
{{ published.method }} Uncertainty: interactivity and throughput ±{{ published.unc_xy }},
occupancy exact (printed labels). These are 8× H200 numbers; compare shapes, not magnitudes, with
CPU runs.</p>
{% for s in published.series %}<table><thead><tr><th class="k">{{ s.name }} (build {{ s.build }})
</th><th>interactivity (tok/s/user)</th><th>throughput/GPU (tok/s)</th><th>mean running</th>
</tr></thead><tbody>{% for p in s.points %}<tr><td class="k">{{ p.label }}</td>
<td>{{ p.x }}</td><td>{{ p.y }}</td><td>{{ p.occ }}</td></tr>{% endfor %}</tbody></table>
{% endfor %}

{% for fig in figures + capacity + timeseries %}
<script type="application/json" id="{{ fig.id }}-data">{{
fig.json|safe }}</script>{% endfor %}
<script>
document.querySelectorAll('script[type="application/json"]').forEach(function (node) {
  var fig = JSON.parse(node.textContent);
  var id = node.id.replace(/-data$/, "");
  Plotly.newPlot(id, fig.data, fig.layout,
    {responsive: true, displaylogo: false, showLink: false, showSendToCloud: false,
     toImageButtonOptions: {format: "svg", filename: id}});
});
document.querySelectorAll("details").forEach(function (d) {
  d.addEventListener("toggle", function () {
    d.querySelectorAll(".plot").forEach(function (p) { if (p.data) Plotly.Plots.resize(p); });
  });
});
</script>
</body></html>
"""
)


def capacity_section(
    runs: Sequence[Run], names: Sequence[str], first_index: int
) -> tuple[list[dict[str, str]], list[str]]:
    """Capacity-model figures per run (embedded), or the reason a run has none."""
    figures: list[dict[str, str]] = []
    notes: list[str] = []
    try:
        from harness.capacity import capacity_figures
    except ImportError as exc:  # the capacity area is optional for a report
        return [], [f"capacity model unavailable: {exc}"]
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
            figures.append(
                {
                    "id": f"figure-{first_index + len(figures)}",
                    "caption": name,
                    "json": _script_json(fig.to_json()),
                }
            )
    return figures, notes


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "run"


def default_report_path(runs: Sequence[Run]) -> Path:
    names = "-vs-".join(_safe_name(run.name) for run in runs[:3])
    if len(runs) > 3:
        names += f"-and-{len(runs) - 3}-more"
    return dashboards_dir() / f"{names}.html"


def render_report(runs: Sequence[Run], *, baseline_index: int = 0, title: str | None = None) -> str:
    """The report's HTML text for loaded runs (runs[baseline_index] is the baseline)."""
    if not runs:
        raise RunError("report: no runs given")
    published_data, published_series = load_published()
    figures = []
    for index, (definition, caption) in enumerate(
        (
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
    ):
        fig = pareto_figure(runs, definition=definition)
        figures.append(
            {"id": f"figure-{index}", "caption": caption, "json": _script_json(fig.to_json())}
        )

    series = run_series(runs)
    capacity, capacity_notes = capacity_section(runs, [s.name for s in series], len(figures))
    timeseries = []
    keys = sorted({(p.parallel, p.number) for run in runs for p in run.points})
    for index, (parallel, number) in enumerate(keys):
        entries = []
        label = f"c{parallel}"
        for style, (run, s) in enumerate(zip(runs, series, strict=True)):
            for record in run.points:
                if (record.parallel, record.number) != (parallel, number):
                    continue
                label = record.label
                path = RunLayout(run.root).samples_csv(record.point_id)
                if not path.is_file():
                    continue
                name = s.name + (f" r{record.repeat}" if record.repeat else "")
                entries.append((name, style, tuple(record.window), read_scraped(path)))
        if entries:
            fig = timeseries_figure(label, entries)
            caption = f"{label} — parallel {parallel}, {number} conversations"
            timeseries.append(
                {
                    "id": f"timeseries-{index}",
                    "json": _script_json(fig.to_json()),
                    "caption": caption,
                }
            )

    invalid = [
        {"run": s.name, "point": p.label, "reasons": "; ".join(p.invalid_reasons)}
        for s in series
        for p in s.points
        if not p.valid
    ]
    invalid += [
        {
            "run": s.name,
            "point": p.label,
            "reasons": "left out of the median (other repeats valid): " + "; ".join(p.excluded),
        }
        for s in series
        for p in s.points
        if p.excluded
    ]
    unc = published_data.get("uncertainty", {})
    published = {
        "title": published_data.get("title", ""),
        "workload": published_data.get("workload", ""),
        "post": published_data.get("source", {}).get("post", ""),
        "method": published_data.get("source", {}).get("method", ""),
        "unc_xy": f"{100 * float(unc.get('interactivity', 0)):.1f}%",
        "series": [
            {
                "name": s.name,
                "build": s.build or "?",
                "points": [
                    {
                        "label": p.label,
                        "x": _fmt(p.values.get("interactivity")),
                        "y": _fmt(p.values.get("throughput_per_gpu")),
                        "occ": f"{p.values['occupancy']:.1f}"
                        if p.values.get("occupancy") is not None
                        else "–",
                    }
                    for p in s.points
                ],
            }
            for s in published_series
        ],
    }
    run_rows = [
        {
            "name": s.name,
            "profile": run.manifest.profile_name,
            "status": run.manifest.status,
            "points": len(s.points),
            "invalid": sum(not p.valid for p in s.points),
            "workload_key": run.manifest.workload_key,
            "provenance": provenance(run),
        }
        for run, s in zip(runs, series, strict=True)
    ]
    return TEMPLATE.render(
        title=title or f"repro report · {figure_title(runs)}",
        version=__version__,
        generated=_when(dt.datetime.now(tz=dt.UTC).timestamp()),
        plotlyjs=get_plotlyjs(),
        runs=run_rows,
        baseline=baseline_index,
        tolerance=f"{DEFAULT_TOLERANCE:.0%}",
        comparable=len({run.manifest.workload_key for run in runs}) <= 1,
        invalid=invalid,
        figures=figures,
        capacity=capacity,
        capacity_notes=capacity_notes,
        tables=[curve_table(runs, baseline_index), *point_tables(runs, baseline_index)],
        timeseries=timeseries,
        published=published,
    )


def write_report(
    run_dirs: Sequence[Path],
    *,
    baseline: Path | None = None,
    out: Path | None = None,
    title: str | None = None,
) -> Path:
    """Write the standalone HTML report; returns its path (default: dashboards_dir()).

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
    html_text = render_report(runs, baseline_index=0, title=title)
    path = Path(out) if out else default_report_path(runs)
    if path.suffix.lower() not in {".html", ".htm"}:
        raise RunError(f"{path}: the report is HTML; give --out a .html file name")
    from harness.results import atomic_write_text

    atomic_write_text(path, html_text)
    path.chmod(0o644)  # a report is meant to be shared (the temp file was 0600)
    return path


def resolve_run_dir(spec: str | Path) -> Path:
    """A run given as a directory, or as a run id under results_dir()."""
    from harness.paths import results_dir

    path = Path(spec).expanduser()
    if (path / "manifest.json").is_file():
        return path
    candidate = results_dir() / str(spec)
    if (candidate / "manifest.json").is_file():
        return candidate
    raise RunError(f"{spec}: not a run directory (no manifest.json there or under {results_dir()})")
