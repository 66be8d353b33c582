"""The sweep's failure handling against a simulated server told to fail (faults at scale are the
same code paths; the small cpu-tiny workload keeps this quick)."""

from __future__ import annotations

from harness.results import load_run
from harness.run.sweep import SweepRequest, run_sweep
from harness.serve.server import free_port

OVER = [
    "sweep.points=[[2,4],[2,4]]",
    "sweep.dataset_offset=0",
    "sweep.scrape_interval_s=1",
    "sweep.sleep_between_points_s=1",
    "sweep.warmup_requests=1",
]


def _sweep(tmp_path, run_id, sim_args, overrides=OVER):
    return load_run(
        run_sweep(
            SweepRequest(
                profile="hisparse384",
                engine="sim",
                time_scale=10,
                dataset="cpu-tiny",
                overrides=overrides,
                out=tmp_path,
                run_id=run_id,
                port=free_port(),
                sim_args=sim_args,
            ),
            echo=lambda _m: None,
        )
    )


def test_http_500s_and_truncated_streams_invalidate_the_point(tmp_path):
    over = ["sweep.points=[[2,4]]", *OVER[1:]]
    run = _sweep(tmp_path, "f500", ["--fail-rate=0.1", "--truncate-rate=0.1"], over)
    (point,) = run.points
    assert not point.valid
    assert point.client.failed_requests > 0
    assert any("failed requests" in r for r in point.invalid_reasons)
    # a failed turn abandons its conversation: fewer requests than conversations x turns
    assert point.client.total_requests < point.number * point.turns
    assert run.manifest.status == "complete"


def test_metrics_hang_is_recorded_as_scrape_gaps(tmp_path):
    over = ["sweep.points=[[2,4]]", *OVER[1:]]
    run = _sweep(tmp_path, "hang", ["--metrics-hang-after=0"], over)
    (point,) = run.points
    assert point.scrape_gaps > 0 and point.samples == 0
    assert point.metrics["occupancy"] is None  # never 0: no sample saw the server
    assert point.client.failed_requests == 0


def test_server_death_mid_sweep_restarts_it(tmp_path):
    log = []
    # dies as the first point's 5th stream arrives (a count, not seconds: the same request on
    # any machine); the sweep restarts it for the second
    run = load_run(
        run_sweep(
            SweepRequest(
                profile="hisparse384",
                engine="sim",
                time_scale=2,
                dataset="cpu-tiny",
                overrides=["sweep.points=[[1,8],[2,2]]", *OVER[1:]],
                out=tmp_path,
                run_id="die",
                port=free_port(),
                sim_args=["--die-after-requests=4"],
            ),
            echo=log.append,
        )
    )
    first, second = sorted(run.points, key=lambda p: p.parallel)
    assert not first.valid and any("died" in r for r in first.invalid_reasons)
    assert any("restarting" in line for line in log)
    assert "server restarted after this point" in first.notes
    assert second.client is not None and second.client.total_requests > 0
