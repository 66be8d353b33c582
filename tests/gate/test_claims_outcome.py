"""Outcome claims (served / refused because ...) on simulated 1M runs, and their schema."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.gate_runs import repro

from harness.errors import ConfigError
from harness.gate.claims import load_claims, run_claims
from harness.sim.run import run_simulation
from harness.sim.startup import EngineRefused

REPO = Path(__file__).resolve().parents[2]
CLAIMS = REPO / "launch/claims/glm53-1m.yaml"
SETS = ["sweep.points=[[1,1],[2,2]]"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    recipe = root / "one-m.yaml"
    recipe.write_text(
        "number: 3\nnum_turns: 2\nfirst_turn_length: 1000000\nsubsequent_turn_length: 500\n"
    )
    hs = run_simulation(
        "hisparse384-1m", dataset=str(recipe), overrides=SETS, out=root, run_id="hs"
    )
    with pytest.raises(EngineRefused):
        run_simulation("offload512-1m", dataset=str(recipe), overrides=SETS, out=root, run_id="off")
    small = root / "small.yaml"  # the same arm on 30k-token conversations
    small.write_text(
        "number: 3\nnum_turns: 2\nfirst_turn_length: 30000\nsubsequent_turn_length: 500\n"
    )
    short = run_simulation(
        "hisparse384-1m", dataset=str(small), overrides=SETS, out=root, run_id="short"
    )
    return {"hs": hs, "off": root / "off", "short": short}


def _status(run_dirs: list[Path]) -> dict[str, tuple[str, str]]:
    results, _ = run_claims(run_dirs, claims_path=CLAIMS)
    return {r.id: (r.status, r.detail) for r in results}


def test_both_1m_claims_hold_and_the_cli_finds_the_claims_file(runs):
    status = _status([runs["hs"], runs["off"]])
    assert status["hisparse-1m-serves"][0] == "holds"
    assert "c2: 4/4 requests succeeded" in status["hisparse-1m-serves"][1]
    assert status["offloading-1m-refused"][0] == "holds"
    # the shipped calibration's pool, in vLLM's blocks of served rows (docs/simulator.md §3):
    # 1,048,576 / 64 = 16,384 blocks x 54,728 B x 64 = 57,386,467,328 B = 53.45 GiB
    assert "53.45 GiB KV cache is needed" in status["offloading-1m-refused"][1]
    out = repro("claims", "check", str(runs["hs"]), str(runs["off"]))  # no --claims
    assert out.returncode == 0, out.stderr
    assert "glm53-1m.yaml" in out.stdout and "claims: 2 holds, 0 fails" in out.stdout


def test_served_fails_on_a_failed_request_or_a_smaller_workload(runs, tmp_path):
    broken = shutil.copytree(runs["hs"], tmp_path / "broken")
    path = next((broken / "points").glob("*/point.json"))
    data = json.loads(path.read_text())
    data["client"]["failed_requests"] = 1
    data["client"]["success_requests"] -= 1
    path.write_text(json.dumps(data))
    status, detail = _status([broken])["hisparse-1m-serves"]
    assert status == "fails" and "not every request succeeded" in detail
    status, detail = _status([runs["short"]])["hisparse-1m-serves"]
    assert status == "fails" and "mean prompt below 1,000,000" in detail


def test_refused_fails_when_the_arm_started_or_for_another_reason(runs, tmp_path):
    started = shutil.copytree(runs["hs"], tmp_path / "started")
    manifest = json.loads((started / "manifest.json").read_text())
    manifest["profile_name"] = "offload512-1m"
    (started / "manifest.json").write_text(json.dumps(manifest))
    status, detail = _status([started])["offloading-1m-refused"]
    assert status == "fails" and "was not refused" in detail
    other = shutil.copytree(runs["off"], tmp_path / "other")
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["start_failure"]["reason"] = "CUDA out of memory"
    (other / "manifest.json").write_text(json.dumps(manifest))
    status, detail = _status([other])["offloading-1m-refused"]
    assert status == "fails" and "does not contain" in detail


@pytest.mark.parametrize(
    ("claim", "needle"),
    [
        (
            "{id: a, outcome: {arm: hs, expect: served}, op: '>=', value: 1}",
            "outcome stands alone",
        ),
        ("{id: a, outcome: {arm: hs, expect: started}}", "expect"),
        ("{id: a, outcome: {arm: hs, expect: served, reason: x}}", "refused only"),
        ("{id: a, outcome: {arm: hs, expect: refused, min_prompt_tokens: 5}}", "served only"),
        ("{id: a, outcome: {arm: hs, expect: refused, because: x}}", "because"),
        ("{id: a, outcome: {arm: nope, expect: served}}", "unknown arm 'nope'"),
        ("{id: a, text: only text}", "give left and op"),
    ],
)
def test_outcome_claims_are_validated_strictly(tmp_path, claim, needle):
    path = tmp_path / "c.yaml"
    path.write_text(f"arms: {{hs: {{profiles: [hisparse384-1m]}}}}\nclaims:\n  - {claim}\n")
    with pytest.raises(ConfigError) as err:
        load_claims(path)
    assert needle in str(err.value) and str(path) in str(err.value)
