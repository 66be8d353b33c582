"""How a run's status is settled from its job's final Slurm state, and the manifest's job field."""

from __future__ import annotations

import json

import pytest
from support.gate_runs import manifest_data

from harness.cluster.records import _describe, _settle, merge_facts
from harness.cluster.slurm import SlurmState
from harness.results import JobFacts, RunManifest


def manifest(status: str) -> RunManifest:
    return RunManifest.model_validate(manifest_data("r", status=status))


@pytest.mark.parametrize(
    ("state", "before", "after"),
    [
        ("TIMEOUT", "partial", "failed"),  # the sweep saw SIGTERM; Slurm killed it
        ("TIMEOUT", "running", "failed"),  # SIGKILLed before it wrote a status
        ("NODE_FAIL", "running", "failed"),
        ("OUT_OF_MEMORY", "partial", "failed"),
        ("UNKNOWN", "running", "failed"),  # Slurm forgot the job: never a silent hole
        ("CANCELLED", "partial", "partial"),  # resumable
        ("CANCELLED", "running", "partial"),
        ("FAILED", "running", "failed"),
        ("FAILED", "partial", "partial"),  # the sweep's own word stands
        ("COMPLETED", "complete", "complete"),
        ("TIMEOUT", "complete", "complete"),  # finished just in time: results are whole
    ],
)
def test_run_status_after_the_job_ended(state, before, after):
    m = manifest(before)
    _settle(m, JobFacts(job_id="7", state=state, reason="r", ended_at=5.0))
    assert m.status == after
    noted = [n for n in m.notes if n.startswith("slurm job 7:")]
    assert noted == ([] if state == "COMPLETED" else [f"slurm job 7: {state} (r)"])
    assert m.finished_at == 5.0


def test_slurms_reason_is_kept_and_missing_reasons_are_explained():
    timeout = SlurmState("7", "TIMEOUT", "TimeLimit", "0:15", "vm", "debug")
    assert _describe(timeout, "7") == ("TIMEOUT", "TimeLimit")
    assert _describe(SlurmState("7", "CANCELLED", None, "0:15", "vm", "debug"), "7") == (
        "CANCELLED",
        "cancelled (scancel)",
    )
    state, reason = _describe(None, "7")
    assert state == "UNKNOWN" and "no longer knows job 7" in reason


def test_a_new_job_of_the_run_keeps_the_earlier_ids():
    m = manifest("partial")
    merge_facts(m, JobFacts(job_id="7", state="CANCELLED"))
    merge_facts(m, JobFacts(job_id="9", state="CANCELLED"))
    merge_facts(m, JobFacts(job_id="12_1", array_index=1, state="COMPLETED"))
    merge_facts(m, JobFacts(job_id="12_1", array_index=1, state="COMPLETED", reason="again"))
    assert m.job.job_id == "12_1" and m.job.previous_job_ids == ["7", "9"]


def test_manifest_job_field_round_trips_and_old_manifests_have_none():
    assert manifest("complete").job is None
    m = manifest("complete")
    m.job = JobFacts(job_id="3_0", array_index=0, node="vm", partition="debug", state="COMPLETED")
    again = RunManifest.model_validate(json.loads(m.model_dump_json()))
    assert again.job == m.job
    with pytest.raises(ValueError, match="job_ids"):
        JobFacts.model_validate({"job_id": "1", "state": "X", "job_ids": []})
