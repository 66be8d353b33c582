"""Plotly figures: the calculator's chart (log x, shaded HiSparse-only region) and memory bars."""

from __future__ import annotations

import pytest

from harness.capacity.figures import capacity_figures, composition_figure, concurrency_figure
from harness.capacity.formulas import GIB, evaluate, make_deployment


def test_concurrency_chart_matches_the_calculator_grid() -> None:
    dep = make_deployment(spec_tokens=3)
    fig = concurrency_figure(dep, selected=[142000])
    hisparse, mtp, baseline = fig.data
    assert list(hisparse.x[:2]) == [8192, 9216] and hisparse.x[-1] == 1048576  # 1,024 steps
    # at 8,192: baseline 6260 // 128 = 48; HiSparse 103692 // (128 + 1280 + 40) = 71
    assert baseline.y[0] == 48 and hisparse.y[0] == 71
    assert "MTP3" in mtp.name and mtp.y[-1] == 5
    assert fig.layout.xaxis.type == "log"
    assert fig.layout.yaxis.range == (0, 128)  # next power of two above 71
    # baseline reaches 0 once ceil(s / 64) > 6260, i.e. s > 400,640: first grid point 401,408
    (region,) = [s for s in fig.layout.shapes if s.type == "rect"]
    assert (region.x0, region.x1) == (401408, 1048576)
    assert any(a.text == "HiSparse only" for a in fig.layout.annotations)


def test_no_shaded_region_when_baseline_never_reaches_zero() -> None:
    dep = make_deployment(gpu="b300", tp=8)
    fig = concurrency_figure(dep, seq_lens=list(range(8192, 65537, 1024)))
    assert not [s for s in fig.layout.shapes if s.type == "rect"]


def test_composition_bars_in_gib() -> None:
    result = evaluate(make_deployment(), 142000)
    fig = composition_figure(result)
    by_name = {(t.y[0], t.name): t.x[0] for t in fig.data}
    weights = by_name[("GPU HBM / DP group", "Model weights")]
    assert weights == pytest.approx(87.965375 * 8)
    latent = by_name[("CPU host pools / DP group", "HiSparse latent KV")]
    assert latent == pytest.approx(29 * 2219 * 2875392 / GIB)
    assert fig.layout.barmode == "stack"


def test_capacity_figures_for_a_deployment() -> None:
    dep = make_deployment(spec_tokens=3)
    figures = capacity_figures(dep, results=[evaluate(dep, 74160)])
    assert len(figures) == 3  # curve, bars (calculator figure), bars (MTP3)
    assert "10,240 hot rows" in figures[2].layout.title.text
    assert len(capacity_figures(dep)) == 1
