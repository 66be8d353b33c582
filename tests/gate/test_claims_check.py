"""Claims as data, checked on crafted runs (pass and fail) and through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support.gate_runs import repro, write_run

from harness.errors import ConfigError
from harness.gate.claims import check_claims, load_claims, match_runs, run_claims
from harness.results import load_run

REPO = Path(__file__).resolve().parents[2]
BLOG = REPO / "launch/claims/glm53-blog.yaml"
CPU = REPO / "launch/claims/cpu-tiny.yaml"


def _set_metric(run_dir: Path, label: str, metric: str, value: float) -> None:
    for path in (run_dir / "points").glob("*/point.json"):
        data = json.loads(path.read_text())
        if data["label"] == label:
            data["metrics"][metric] = value
            path.write_text(json.dumps(data))


def _blog_runs(tmp_path: Path, *, hisparse_c32: float, offload_c32: float) -> list[Path]:
    rng = np.random.default_rng(0)
    hisparse = write_run(tmp_path, "hs", rng, profile="hisparse384")
    offload = write_run(tmp_path, "off", rng, profile="offload512")
    # The published MTP3 values (docs/recipe.md §5) for what the claims read.
    for run, occ, tput in (
        (hisparse, {"c24": 18.1, "c32": hisparse_c32}, {"c1": 4892, "c32": 11682}),
        (offload, {"c24": 4.9, "c32": offload_c32}, {"c1": 4809, "c32": 995}),
    ):
        for label, value in occ.items():
            _set_metric(run, label, "occupancy", value)
        for label, value in tput.items():
            _set_metric(run, label, "throughput_per_gpu", value)
    return [hisparse, offload]


def test_published_blog_values_satisfy_the_blog_claims(tmp_path: Path):
    runs = _blog_runs(tmp_path, hisparse_c32=18.9, offload_c32=4.9)
    results, _notes = run_claims(runs, claims_path=BLOG)
    status = {r.id: r.status for r in results}
    assert status["hisparse-c32-occupancy"] == "holds"
    assert status["occupancy-ratio-c32"] == "holds"
    assert status["throughput-ratio-c32"] == "holds"
    assert status["c1-parity"] == "holds"
    assert status["hisparse-nomtp-c32-occupancy"] == "skipped"  # no no-MTP run given
    ratio = next(r for r in results if r.id == "occupancy-ratio-c32")
    assert "ratio 3.86x" in ratio.detail


def test_a_lost_result_fails_the_claims_and_the_cli_exits_1(tmp_path: Path):
    runs = _blog_runs(tmp_path, hisparse_c32=6.0, offload_c32=4.9)
    results, _ = run_claims(runs, claims_path=BLOG)
    status = {r.id: r.status for r in results}
    assert status["hisparse-c32-occupancy"] == "fails"
    assert status["occupancy-ratio-c32"] == "fails"
    assert status["offloading-c32-occupancy"] == "holds"
    result = repro("claims", "check", *map(str, runs), "--claims", str(BLOG))
    assert result.returncode == 1
    assert "FAILS    hisparse-c32-occupancy" in result.stdout


def test_explicit_arm_mapping_and_all_points(tmp_path: Path):
    rng = np.random.default_rng(1)
    mtp = write_run(tmp_path, "m", rng, profile="some-other-name", gpus=0)
    claims = load_claims(CPU)
    mapping, _ = match_runs(claims, [], {"mtp": mtp})
    results = {r.id: r for r in check_claims(claims, mapping)}
    assert results["mtp-acceptance"].status == "holds"  # 2.6 at every point
    _set_metric(mtp, "c16", "mtp_acceptance_length", 1.5)
    mapping, _ = match_runs(claims, [], {"mtp": mtp})
    failed = {r.id: r for r in check_claims(claims, mapping)}["mtp-acceptance"]
    assert failed.status == "fails" and "c16: 1.5 >= 1.9  <-- fails" in failed.detail
    ok = repro("claims", "check", "--claims", str(CPU), "--arm", f"mtp={mtp}")
    assert ok.returncode == 1  # c16 now fails


def test_field_operands_and_missing_values(tmp_path: Path):
    rng = np.random.default_rng(2)
    pressure = write_run(
        tmp_path, "p", rng, profile="cpu-tiny-pressure", gpus=0, points=[(1, 2), (4, 8), (8, 16)]
    )
    _set_metric(pressure, "c8", "occupancy", 1.3)
    _set_metric(pressure, "c8", "waiting_max", 7)
    results = {r.id: r for r in run_claims([pressure], claims_path=CPU)[0]}
    assert results["pressure-top-occupancy"].status == "holds"  # 1.3 <= 0.5 x 8
    assert results["pressure-top-waiting"].status == "holds"  # 7 >= 0.5 x 8
    assert results["occupancy-ratio-top"].status == "skipped"  # needs the cpu-tiny arm too
    _set_metric(pressure, "c8", "occupancy", None)
    results = {r.id: r for r in run_claims([pressure], claims_path=CPU)[0]}
    assert results["pressure-top-occupancy"].status == "fails"
    assert "no value" in results["pressure-top-occupancy"].detail


def test_claims_file_validation_and_nothing_applicable(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "arms: {a: {profiles: [x]}}\nclaims:\n  - id: c\n    left: {arm: b, point: c1, "
        "metric: occupancy}\n    op: '>='\n    value: 1\n"
    )
    with pytest.raises(ConfigError, match=r"bad.yaml.*unknown arm 'b'"):
        load_claims(bad)
    bad.write_text(
        "arms: {a: {profiles: [x]}}\nclaims:\n  - id: c\n    left: {arm: a, point: c1, "
        "metric: occupancy, colour: red}\n    op: '>='\n    value: 1\n"
    )
    with pytest.raises(ConfigError, match=r"claims.0.left.colour.*unknown key"):
        load_claims(bad)
    run = write_run(tmp_path, "r", np.random.default_rng(3), profile="unrelated")
    result = repro("claims", "check", str(run), "--claims", str(BLOG))
    assert result.returncode == 2 and "no claim applies" in result.stderr
    assert load_run(run).manifest.profile_name == "unrelated"
