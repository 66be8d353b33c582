"""Crafted run directories (written with harness.results records) and the figure's structure.

`write_run` is imported by the dashboard and compare tests too.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from support.crafted_runs import published_points, write_run

from harness.analysis.frontier import frontier_mask, frontier_path
from harness.analysis.groups import series_points
from harness.report.figures import (
    load_published,
    pareto_figure,
    traces_by_role,
)
from harness.report.series import PUBLISHED_FILE, run_title
from harness.results import (
    load_run,
)

# --------------------------------------------------------------------------- frontier


def test_frontier_drops_dominated_and_keeps_tradeoffs() -> None:
    pts = [(10.0, 100.0), (20.0, 80.0), (5.0, 50.0), (15.0, 90.0), (25.0, 10.0)]
    assert frontier_mask(pts) == [True, True, False, True, True]
    assert frontier_path(pts) == [0, 3, 1, 4]


def test_frontier_ties_on_one_axis_are_dominated() -> None:
    # Same interactivity, lower throughput: dominated (>= on both, > on one).
    assert frontier_mask([(10.0, 100.0), (10.0, 90.0)]) == [True, False]
    # Same throughput, lower interactivity: dominated too.
    assert frontier_mask([(10.0, 100.0), (12.0, 100.0)]) == [False, True]


def test_frontier_duplicates_stay_and_are_drawn_once() -> None:
    pts = [(10.0, 100.0), (10.0, 100.0), (5.0, 200.0)]
    assert frontier_mask(pts) == [True, True, True]
    assert frontier_path(pts) == [2, 0]


def test_frontier_ignores_missing_and_nan() -> None:
    pts = [(10.0, 100.0), (None, 500.0), (math.nan, 1e9), (1.0, 1.0)]
    assert frontier_mask(pts) == [True, False, False, False]


def test_frontier_matches_published_membership() -> None:
    _, series = load_published()
    hisparse, offloading = series

    def mask(s):
        return frontier_mask(
            [(p.values["interactivity"], p.values["throughput_per_gpu"]) for p in s.points]
        )

    # docs/recipe.md §5: HiSparse c24 dominated by c32; offloading only c1 and c8 on the frontier.
    assert mask(hisparse) == [True, True, True, False, True]
    assert mask(offloading) == [True, True, False, False, False]


# --------------------------------------------------------------------------- figure structure


@pytest.fixture
def two_runs(tmp_path: Path):
    a = write_run(tmp_path / "a", "hisparse-run", published_points(0))
    b = write_run(
        tmp_path / "b",
        "offload-run",
        published_points(1),
        profile_name="offload512",
        build={"commit": "80cb71c9ff00"},
    )
    return load_run(a), load_run(b)


def test_figure_has_every_trace_per_series(two_runs) -> None:
    fig = pareto_figure(two_runs)
    for role in ("sweep", "frontier", "points", "occupancy"):
        mine = traces_by_role(fig, role, published=False)
        assert [t.meta["series"] for t in mine] == [
            "hisparse-run (hisparse384)",
            "offload-run (offload512)",
        ], role
        assert len(traces_by_role(fig, role, published=True)) == 2, role
    points = traces_by_role(fig, "points", published=False)[0]
    assert list(points.x) == pytest.approx([257.1, 31.8, 17.9, 12.7, 14.4])
    # The faint line follows sweep order; the bold line only the frontier, by interactivity.
    sweep = traces_by_role(fig, "sweep", published=False)[0]
    assert list(sweep.x) == list(points.x)
    frontier = traces_by_role(fig, "frontier", published=False)[0]
    assert list(frontier.x) == pytest.approx([14.4, 17.9, 31.8, 257.1])
    assert [row[2] for row in points.customdata] == [True, True, True, False, True]
    occupancy = traces_by_role(fig, "occupancy", published=False)[0]
    assert list(occupancy.x) == ["1", "8", "16", "24", "32"]
    assert list(occupancy.text) == ["1.0", "7.1", "11.9", "18.1", "18.9"]
    assert fig.layout.xaxis2.type == "category"
    assert "Interactivity" in fig.layout.xaxis.title.text
    assert "total-token throughput per GPU" in fig.layout.yaxis.title.text


def test_overlapping_points_get_one_merged_label(two_runs) -> None:
    fig = pareto_figure(two_runs)
    offload = traces_by_role(fig, "points", published=False)[1]
    assert list(offload.text) == ["c1", "c8", "c16", "c24/c32", ""]


def test_published_series_are_labelled_and_hidden_when_off_scale(tmp_path: Path) -> None:
    tiny = [
        {
            "parallel": p,
            "number": 2 * p,
            "interactivity": 50.0 / p,
            "throughput_per_gpu": 30.0 * p,
            "occupancy": p * 0.9,
        }
        for p in (1, 4, 8)
    ]
    run = load_run(write_run(tmp_path / "cpu", "cpu-run", tiny, gpus=0))
    fig = pareto_figure([run])
    published = traces_by_role(fig, "points", published=True)
    assert all(t.name.startswith("published · ") for t in published)
    assert all(t.visible == "legendonly" for t in published)
    assert "CPU" in fig.layout.title.text
    assert "click them in the legend" in fig.layout.meta["footnote"]
    shown = pareto_figure([run], published_visible=True)
    assert all(t.visible is True for t in traces_by_role(shown, "points", published=True))
    assert traces_by_role(pareto_figure([run], published=False), "points", published=True) == []


def test_title_and_footnote_come_from_metadata(two_runs) -> None:
    fig = pareto_figure(two_runs[:1])
    assert run_title(two_runs[0]) == "glm-agentx · openhands-glm53 · TP8 · 8× NVIDIA H200"
    note = fig.layout.meta["footnote"]
    assert "13-turn workload, fixed 220-token outputs" in note
    assert "e8ef1e07bd" in note
    assert "prefix-cached prompt tokens" in note


def test_bench_sweep_definition_uses_output_metrics(tmp_path: Path) -> None:
    pts = [
        {
            "parallel": p,
            "number": 2 * p,
            "interactivity": 100.0 / p,
            "throughput_per_gpu": 1000.0 * p,
            "output_tps_per_user": 10.0 / p,
            "output_throughput_per_gpu": 3.0 * p,
            "occupancy": float(p),
        }
        for p in (1, 8, 16)
    ]
    run = load_run(write_run(tmp_path / "r", "r", pts))
    fig = pareto_figure([run], definition="bench-sweep")
    points = traces_by_role(fig, "points", published=False)[0]
    assert list(points.x) == pytest.approx([10.0, 1.25, 0.625])
    assert list(points.y) == pytest.approx([3.0, 24.0, 48.0])
    assert "configured concurrency" in fig.layout.xaxis.title.text
    assert "Output-token throughput per GPU" in fig.layout.yaxis.title.text
    assert "bench sweep" in fig.layout.annotations[0].text  # the subplot title names it
    assert traces_by_role(fig, "points", published=True) == []  # blog published only its own


def test_repeats_are_medians_with_ci_error_bars(tmp_path: Path) -> None:
    pts = []
    for repeat, (x, y) in enumerate([(10.0, 100.0), (12.0, 130.0), (11.0, 90.0)]):
        pts.append(
            {
                "parallel": 1,
                "number": 2,
                "repeat": repeat,
                "interactivity": x,
                "throughput_per_gpu": y,
                "occupancy": 1.0,
            }
        )
    pts.append(
        {
            "parallel": 4,
            "number": 8,
            "interactivity": 5.0,
            "throughput_per_gpu": 300.0,
            "occupancy": 3.5,
        }
    )
    run = load_run(write_run(tmp_path / "r", "r", pts))
    [first, second] = series_points(run)
    assert first.repeats == 3 and first.values["interactivity"] == 11.0
    assert first.ci["throughput_per_gpu"] == (90.0, 130.0)
    points = traces_by_role(pareto_figure([run]), "points", published=False)[0]
    assert list(points.y) == pytest.approx([100.0, 300.0])
    assert list(points.error_y.array) == pytest.approx([30.0, 0.0])
    assert list(points.error_y.arrayminus) == pytest.approx([10.0, 0.0])
    assert second.ci == {}
    assert first.excluded == [] and first.valid


def test_invalid_repeat_is_left_out_of_the_median_but_named(tmp_path: Path) -> None:
    pts = [
        {"parallel": 1, "number": 2, "repeat": r, "interactivity": x, "throughput_per_gpu": 100.0}
        for r, x in enumerate([10.0, 12.0, 500.0])
    ]
    pts[2].update(valid=False, invalid_reasons=["server restarted"])
    [point] = series_points(load_run(write_run(tmp_path / "r", "r", pts)))
    assert point.valid and point.repeats == 2
    assert point.values["interactivity"] == 11.0  # the invalid 500 does not move the median
    assert point.excluded == ["p001-n0002-r2: server restarted"]
    pts[0]["valid"] = pts[1]["valid"] = False
    [point] = series_points(load_run(write_run(tmp_path / "s", "s", pts)))
    assert not point.valid and point.repeats == 3 and point.excluded == []
    assert "p001-n0002-r2: server restarted" in point.invalid_reasons


def test_invalid_points_are_flagged_and_off_the_lines(tmp_path: Path) -> None:
    pts = [
        {"parallel": 1, "number": 2, "interactivity": 10.0, "throughput_per_gpu": 100.0},
        {
            "parallel": 4,
            "number": 8,
            "interactivity": 50.0,
            "throughput_per_gpu": 900.0,
            "valid": False,
            "invalid_reasons": ["3 of 32 requests failed"],
        },
        {"parallel": 8, "number": 16, "interactivity": 5.0, "throughput_per_gpu": 200.0},
    ]
    run = load_run(write_run(tmp_path / "r", "r", pts))
    fig = pareto_figure([run], published=False)
    [invalid] = traces_by_role(fig, "invalid")
    assert list(invalid.x) == [50.0]
    assert "3 of 32 requests failed" in invalid.hovertext[0]
    frontier = traces_by_role(fig, "frontier")[0]
    assert 50.0 not in list(frontier.x)  # the invalid point would have dominated everything
    assert list(frontier.x) == [5.0, 10.0]


def test_unknown_definition_is_a_clear_error(two_runs) -> None:
    from harness.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown figure definition 'nope'"):
        pareto_figure(two_runs, definition="nope")


def test_series_names_are_escaped_for_plotly(tmp_path: Path) -> None:
    run = load_run(write_run(tmp_path / "r", "<b>bold</b>", published_points(0)))
    fig = pareto_figure([run], published=False)
    points = traces_by_role(fig, "points")[0]
    assert points.name.startswith("&lt;b&gt;bold&lt;/b&gt;")
    assert "<b>bold</b>" not in fig.layout.title.text


def test_published_file_is_validated_strictly(tmp_path: Path) -> None:
    from harness.errors import ConfigError

    good = yaml.safe_load(PUBLISHED_FILE.read_text(encoding="utf-8"))
    good["series"][1]["points"][0]["interactivty"] = 1.0  # typo
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(good), encoding="utf-8")
    with pytest.raises(
        ConfigError,
        match=r"bad.yaml: series\[1\].points\[0\]: unknown key.*"
        r"interactivty",
    ):
        load_published(bad)
    data, series = load_published()
    assert data["uncertainty"]["interactivity"] == 0.005
    assert [s.build for s in series] == ["e8ef1e07bd", "80cb71c9ff"]
