"""A served outcome over points whose client wrote no summary: the claim fails naming them
(it was an AttributeError on the missing summary)."""

from __future__ import annotations

import numpy as np
from support.gate_runs import write_run

from harness.gate.outcome import served
from harness.results import ClientSummary, load_run


def test_a_point_without_a_client_summary_is_not_served(tmp_path):
    run = load_run(write_run(tmp_path, "r", np.random.default_rng(0), points=[(1, 1), (2, 2)]))
    assert [p.client for p in run.points] == [None, None]  # write_run records no client

    status, detail = served(run, None)

    assert status == "fails"
    assert "c1: no client summary" in detail and "c2 has no client summary" in detail


def test_the_same_points_with_every_request_succeeded_are_served(tmp_path):
    run = load_run(write_run(tmp_path, "r", np.random.default_rng(0), points=[(1, 1)]))
    summary = ClientSummary(
        total_requests=13, success_requests=13, failed_requests=0, duration_s=1.0, concurrency=1
    )
    run.points = [p.model_copy(update={"client": summary}) for p in run.points]

    status, detail = served(run, None)

    assert (status, detail) == ("holds", "run complete; c1: 13/13 requests succeeded")
