"""The append-only history: keys, accept/reject as events, baselines, and the CLI."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
from support.gate_runs import repro, write_run

from harness.gate.history import History, hardware_fingerprint, history_key
from harness.gate.regress import IncomparableError, regress
from harness.results import load_run


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "history.sqlite"


def test_accept_reject_are_new_events_and_rows_are_never_rewritten(tmp_path: Path, db: Path):
    run = load_run(write_run(tmp_path, "r1", np.random.default_rng(1), sigma=0.01))
    history = History.open(db)
    first = history.record(run, state="accepted", reason="nightly: ok")
    assert first.state == "accepted"
    history.set_state(str(first.ref), "rejected", "bad node")
    assert history.entry("r1").state == "rejected"  # latest event wins...
    events = history.events("r1")
    assert [e["state"] for e in events] == ["accepted", "rejected"]  # ...and the story stays
    assert history.entries(state="rejected")[0].run_id == "r1"  # still listed, as rejected
    # Recording the same run dir again appends an event, not a second run row.
    history.record(run, state="accepted", reason="re-accepted")
    assert len(history.entries()) == 1 and len(history.events("r1")) == 3

    raw = sqlite3.connect(db)
    for statement in (
        "UPDATE runs SET run_id = 'x'",
        "DELETE FROM runs",
        "UPDATE events SET state = 'accepted'",
        "DELETE FROM events",
    ):
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            raw.execute(statement)
    with pytest.raises(sqlite3.IntegrityError):
        raw.execute(
            "INSERT INTO events (run_ref, state, reason, actor, at) VALUES (1, 'maybe', '', '', 0)"
        )
    raw.close()


def test_keys_split_profile_overrides_workload_and_hardware(tmp_path: Path):
    rng = np.random.default_rng(2)
    manifests = {
        name: load_run(write_run(tmp_path, name, rng, **kw)).manifest.model_dump(mode="json")
        for name, kw in {
            "a": {},
            "b": {},
            "sha": {"sha": "e" * 64},
            "prof": {"profile": "offload512"},
            "set": {"overrides": ["serve.max-num-seqs=2"]},
            "build": {"overrides": ["build=nightly@" + "a" * 40]},
            "port": {"overrides": ["port=18799"]},
        }.items()
    }
    keys = {name: history_key(m) for name, m in manifests.items()}
    assert keys["a"] == keys["b"]
    assert keys["a"].startswith("hisparse384/wl-")
    assert len({keys["a"], keys["sha"], keys["prof"], keys["set"]}) == 4
    assert keys["build"] == keys["a"]  # the build is what history watches, not part of the key
    assert keys["port"] == keys["a"]  # where the server listens does not change the series
    nightly_key = history_key(manifests["set"], include_overrides=False)
    assert nightly_key == keys["a"]  # the nightly's --set is part of the candidate
    host = {"cpu_model": "Xeon", "cpu_count": 2, "mem_available_gib": 3.1, "hostname": "n1"}
    same_box = {**host, "mem_available_gib": 9.9, "hostname": "n2"}
    assert hardware_fingerprint(host) == hardware_fingerprint(same_box)
    assert hardware_fingerprint(host) != hardware_fingerprint({**host, "cpu_model": "EPYC"})


def test_baseline_is_the_median_of_the_last_accepted_runs(tmp_path: Path, db: Path):
    history = History.open(db)
    rng = np.random.default_rng(3)
    for i in range(4):
        run = load_run(write_run(tmp_path, f"ok{i}", rng, sigma=0.01))
        history.record(run, state="accepted", reason="nightly: ok")
    bad = load_run(write_run(tmp_path, "bad", rng, sigma=0.01, steps={"throughput_per_gpu": -0.5}))
    history.record(bad, state="rejected", reason="regression")
    key = history_key(bad.manifest.model_dump(mode="json"))
    assert [e.run_id for e in history.baseline(key, 3)] == ["ok1", "ok2", "ok3"]

    cand = write_run(tmp_path, "cand", rng, sigma=0.01)
    verdict = regress(cand, history_path=db)  # key "auto": the candidate's own
    assert verdict.status != "regression"  # the rejected 50 % drop is not in the baseline
    assert verdict.baseline_runs == ["ok0", "ok1", "ok2", "ok3"]
    dropped = write_run(tmp_path, "dropped", rng, sigma=0.01, steps={"throughput_per_gpu": -0.15})
    assert regress(dropped, history_path=db).exit_code == 1

    with pytest.raises(IncomparableError, match="no accepted run"):
        regress(write_run(tmp_path, "lonely", rng, profile="offload512"), history_path=db)


def test_history_cli_list_show_accept_reject(tmp_path: Path, db: Path):
    run = write_run(tmp_path, "r1", np.random.default_rng(4))
    env_args = ("--db", str(db))
    accepted = repro("history", "accept", str(run), "--reason", "first baseline", *env_args)
    assert accepted.returncode == 0, accepted.stderr
    assert "accepted" in accepted.stdout
    rejected = repro("history", "reject", "r1", "--reason", "noisy neighbour", *env_args)
    assert rejected.returncode == 0 and "rejected" in rejected.stdout
    listed = repro("history", "list", *env_args)
    assert (
        "r1" in listed.stdout and "rejected" in listed.stdout and "noisy neighbour" in listed.stdout
    )
    shown = repro("history", "show", "r1", *env_args)
    assert "first baseline" in shown.stdout and "noisy neighbour" in shown.stdout
    missing = repro("history", "show", "nope", *env_args)
    assert missing.returncode == 2 and "no run 'nope'" in missing.stderr
