"""A simulated run's prediction intervals (`fidelity.interval80`) are drawn as bands on the
figure and its series says which calibration it ran with (issue 24, items 4 and 5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.manifests import minimal_manifest

from harness.engine_spec import EngineSpec
from harness.report.dashboard import render_report
from harness.report.figures import STYLES, pareto_figure, traces_by_role
from harness.report.series import run_series
from harness.results import PointRecord, RunLayout, atomic_write_json, load_run

CAL = "/repo/launch/calibrations/glm53-h200.yaml"
# (parallel, repeat) -> metric values and their intervals
C1 = {"interactivity": 250.0, "throughput_per_gpu": 1800.0, "occupancy": 1.0}
C4 = {"interactivity": 80.0, "throughput_per_gpu": 3000.0, "occupancy": 3.6}
BANDS = {
    1: {"interactivity": [210.0, 295.0], "throughput_per_gpu": [1500.0, 2100.0]},
    4: {
        "interactivity": [67.0, 95.0],
        "throughput_per_gpu": [2600.0, 3400.0],
        "occupancy": [3.4, 3.9],
    },
}


def _record(parallel: int, metrics: dict[str, float], band: dict | None, **kw: Any) -> PointRecord:
    repeat = kw.pop("repeat", 0)
    return PointRecord(
        point_id=f"p{parallel:03d}-n{2 * parallel:04d}-r{repeat}",
        label=f"c{parallel}",
        parallel=parallel,
        number=2 * parallel,
        repeat=repeat,
        dataset_offset=0,
        conversations=list(range(2 * parallel)),
        turns=3,
        expected_requests=6 * parallel,
        started_at=0.0,
        ended_at=1.0,
        window=(0.0, 1.0),
        valid=kw.pop("valid", True),
        metrics=dict(metrics),
        fidelity={"interval80": band} if band else {},
        **kw,
    )


def _run(root: Path, records: list[PointRecord], **manifest: Any) -> Path:
    layout = RunLayout(root)
    fields = {"run_id": root.name, "profile_name": "hisparse384", "sweep": {}, **manifest}
    atomic_write_json(layout.manifest, minimal_manifest(**fields))
    for record in records:
        atomic_write_json(layout.point_json(record.point_id), record)
    return root


def _simulated(root: Path, records: list[PointRecord], path: str | None = CAL) -> Path:
    spec = EngineSpec(kind="sim", simulated=True)
    build = {"engine": "sim", "calibration": {"path": path}}
    return _run(root, records, engine="sim", engine_spec=spec, build=build)


@pytest.fixture
def calibrated(tmp_path: Path) -> Path:
    return _simulated(tmp_path / "sim", [_record(1, C1, BANDS[1]), _record(4, C4, BANDS[4])])


def test_a_run_whose_points_carry_intervals_has_bands_with_their_values(calibrated):
    fig = pareto_figure([load_run(calibrated)], published=False)
    (band,) = traces_by_role(fig, "band")
    # out through both highs in sweep order (c1, c4), back through both lows (c4, c1)
    assert list(band.x) == [295.0, 95.0, 67.0, 210.0]
    assert list(band.y) == [2100.0, 3400.0, 2600.0, 1500.0]
    assert band.fill == "toself" and band.fillcolor == "rgba(27,158,158,0.25)"  # STYLES[0]
    assert STYLES[0][0] == "#1b9e9e"
    (points,) = traces_by_role(fig, "points", published=False)
    assert band.legendgroup == points.legendgroup and band.xaxis == points.xaxis
    assert "210 – 295 tok/s/user" in band.hovertext[0]
    assert "1500 – 2100 tok/s/GPU" in band.hovertext[0]
    # occupancy: only c4 has an interval; a box from its low to its high, in the bar's slot
    (box,) = traces_by_role(fig, "occupancy-band")
    (bars,) = traces_by_role(fig, "occupancy", published=False)
    assert list(box.x) == ["4"] and list(box.base) == [3.4]
    assert box.y[0] == pytest.approx(0.5)
    assert box.offsetgroup == bars.offsetgroup and box.legendgroup == bars.legendgroup
    assert "3.4 – 3.9 requests" in box.hovertext[0]
    assert "80 % prediction interval" in fig.layout.meta["footnote"]


def test_a_run_without_intervals_has_no_band(tmp_path):
    uncal = _simulated(tmp_path / "u", [_record(1, C1, None), _record(4, C4, None)], path=None)
    real = _run(tmp_path / "r", [_record(1, C1, None), _record(4, C4, None)], engine="url")
    fig = pareto_figure([load_run(uncal), load_run(real)], published=False)
    assert traces_by_role(fig, "band") == [] and traces_by_role(fig, "occupancy-band") == []
    assert "prediction interval" not in fig.layout.meta["footnote"]


def test_the_bench_sweep_figure_has_only_the_occupancy_band(calibrated):
    # the simulator gives no interval for output tok/s per user or per GPU
    fig = pareto_figure([load_run(calibrated)], definition="bench-sweep", published=False)
    assert traces_by_role(fig, "band") == []
    assert len(traces_by_role(fig, "occupancy-band")) == 1


def test_repeats_take_the_median_interval_of_the_repeats_in_the_median(tmp_path):
    records = [
        _record(1, C1, {"interactivity": [200.0, 300.0], "throughput_per_gpu": [1.0, 3.0]}),
        _record(
            1, C1, {"interactivity": [220.0, 280.0], "throughput_per_gpu": [2.0, 4.0]}, repeat=1
        ),
        _record(
            1, C1, {"interactivity": [230.0, 290.0], "throughput_per_gpu": [3.0, 5.0]}, repeat=2
        ),
        # an invalid repeat is not in the median, nor in the band
        _record(
            1,
            C1,
            {"interactivity": [1.0, 2.0], "throughput_per_gpu": [1.0, 2.0]},
            repeat=3,
            valid=False,
            invalid_reasons=["failed requests: 1"],
        ),
    ]
    (series,) = run_series([load_run(_simulated(tmp_path / "rep", records))])
    assert series.intervals == {
        (1, 2): {"interactivity": (220.0, 290.0), "throughput_per_gpu": (2.0, 4.0)}
    }


def test_a_malformed_interval_is_left_out(tmp_path):
    bad = {"interactivity": [300.0, 200.0], "throughput_per_gpu": ["x", 2.0], "occupancy": [1.0]}
    (series,) = run_series([load_run(_simulated(tmp_path / "bad", [_record(1, C1, bad)]))])
    assert series.intervals == {}


def test_series_and_report_name_the_calibration(tmp_path, calibrated):
    uncal = _simulated(tmp_path / "u", [_record(1, C1, None)], path=None)
    real = _run(tmp_path / "r", [_record(1, C1, None)], engine="url")
    runs = [load_run(calibrated), load_run(uncal), load_run(real)]
    names = [s.name for s in run_series(runs)]
    assert names == [
        "sim (hisparse384) · simulated (glm53-h200)",
        "u (hisparse384) · simulated, uncalibrated",
        "r (hisparse384)",
    ]
    html = render_report(runs)
    assert "profile hisparse384,\nsimulated (glm53-h200)," in html
    assert "simulated, uncalibrated (roofline defaults)," in html
    assert html.count("roofline defaults") == 1  # the real run's line says nothing of the kind
    # both figures embed the calibrated series' occupancy box, the blog figure its band too
    assert html.count('"role":"band"') == 1 and html.count('"role":"occupancy-band"') == 2
