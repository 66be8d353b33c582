"""A simulated server that refuses to start (1M max-model-len on the offloading arm) fails the
sweep at start-up with vLLM's reason, and the run records it (bounded: the refusal comes before
the dataset is encoded; the cpu-tiny workload keeps the dataset build short)."""

from __future__ import annotations

import json

import pytest

from harness.errors import RunError, ServerStartFailed
from harness.gate.claims import run_claims
from harness.results import load_run
from harness.run.inputs import inspect_dataset
from harness.run.sweep import SweepRequest, open_run, resolve, run_sweep
from harness.serve.server import free_port

REASON = "To serve at least one request with the model's max seq len (1048576)"


def _request(tmp_path, run_id: str) -> SweepRequest:
    return SweepRequest(
        profile="offload512-1m",
        engine="sim",
        dataset="cpu-tiny",
        out=tmp_path,
        run_id=run_id,
        port=free_port(),
    )


def test_a_refused_sim_server_fails_the_sweep_and_the_run_records_why(tmp_path):
    log: list[str] = []
    with pytest.raises(ServerStartFailed) as err:
        run_sweep(_request(tmp_path, "off"), echo=log.append)
    assert err.value.server_exit_code == 1 and REASON in (err.value.reason or "")
    assert "exited with code 1 during start-up: " + REASON in str(err.value)
    run_dir = tmp_path / "off"
    assert "ValueError: " + REASON in (run_dir / "server.log").read_text()
    run = load_run(run_dir)
    assert run.manifest.status == "failed" and not run.points
    failure = run.manifest.start_failure
    assert failure["stage"] == "startup" and failure["exit_code"] == 1
    assert failure["reason"].startswith(REASON) and failure["log"] == str(run_dir / "server.log")
    results, _ = run_claims([run_dir])  # the claims file naming offload512-1m
    (refused,) = [r for r in results if r.id == "offloading-1m-refused"]
    assert refused.status == "holds"
    # the same run id again: refused before anything is written
    before = (run_dir / "manifest.json").read_text()
    with pytest.raises(RunError, match="already exists"):
        run_sweep(_request(tmp_path, "off"), echo=log.append)
    assert json.loads((run_dir / "manifest.json").read_text()) == json.loads(before)


def test_a_resumed_run_is_judged_on_its_own_start(tmp_path):
    with pytest.raises(ServerStartFailed):
        run_sweep(_request(tmp_path, "off"), echo=lambda _m: None)
    target = resolve(SweepRequest(resume=tmp_path / "off"))
    sweep = open_run(target, inspect_dataset(target.dataset_spec, build=True), [], lambda _m: None)
    assert sweep.manifest.start_failure is None
    assert any(
        "an earlier start failed" in note and REASON in note for note in sweep.manifest.notes
    )
    assert load_run(tmp_path / "off").manifest.start_failure is None  # written as it reopened
