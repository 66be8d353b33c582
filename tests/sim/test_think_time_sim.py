"""The simulated client honours think time in virtual time (harness/sim/client.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.analysis.request_table import read_table
from harness.results import load_run
from harness.sim.run import run_simulation

SETS = ["sweep.points=[[1,2],[4,8]]", "sweep.dataset_offset=3", "sweep.scrape_interval_s=2"]


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    recipe = tmp_path_factory.mktemp("think") / "small.yaml"
    recipe.write_text(
        "number: 10\nnum_turns: 3\nfirst_turn_length: 30000\nsubsequent_turn_length: 500\n"
    )
    return recipe


def simulate(small: Path, out: Path, rid: str, *extra: str, profile: str = "hisparse384") -> Path:
    return run_simulation(
        profile, dataset=str(small), overrides=[*SETS, *extra], out=out, run_id=rid
    )


def _points(run_dir: Path) -> list[dict]:
    out = []
    for path in sorted((run_dir / "points").glob("*/point.json")):
        out.append(json.loads(path.read_text()))
    return out


def test_pauses_of_zero_reproduce_the_run_without_think_time(small, tmp_path):
    plain = simulate(small, tmp_path, "plain")
    zero = simulate(small, tmp_path, "zero", "sweep.think_time={kind: fixed, seconds: 0}")
    assert _points(plain) == _points(zero)
    for pid in ("p001-n0002-r0", "p004-n0008-r0"):
        a = (plain / "points" / pid / "samples.csv").read_bytes()
        assert a == (zero / "points" / pid / "samples.csv").read_bytes()
    # a pause of 0 is no pause: the workload identity is the blog's
    assert load_run(plain).manifest.configuration_key == load_run(zero).manifest.configuration_key


def test_each_turn_is_sent_its_pause_after_the_previous_reply(small, tmp_path):
    run_dir = simulate(small, tmp_path, "paused", "sweep.think_time={kind: fixed, seconds: 7}")
    plain = simulate(small, tmp_path, "plain2")
    assert (
        load_run(run_dir).manifest.configuration_key != load_run(plain).manifest.configuration_key
    )
    table = read_table(run_dir / "points" / "p001-n0002-r0" / "requests.parquet")
    assert len(table) == 2 * 3
    later = table[table["turn"] > 1]
    assert (later["think_s"] == 7.0).all()
    assert later["gap_s"].to_numpy() == pytest.approx([7.0] * len(later), abs=1e-9)
    # one request at a time: the pause lengthens the point by exactly the pauses taken,
    # and is in no request's latency
    base = read_table(plain / "points" / "p001-n0002-r0" / "requests.parquet")
    span = table["end_s"].max() - table["start_s"].min()
    base_span = base["end_s"].max() - base["start_s"].min()
    busy = table["latency_s"].sum()
    assert span == pytest.approx(busy + 7.0 * len(later), rel=1e-9)
    assert base_span == pytest.approx(base["latency_s"].sum(), rel=1e-9)
    assert (table["ttft_s"] <= table["latency_s"]).all()


def test_seeded_exponential_pauses_are_the_same_in_every_run(small, tmp_path):
    think = "sweep.think_time={kind: exponential, mean_s: 3, seed: 5}"
    a = read_table(simulate(small, tmp_path, "e1", think) / "points/p004-n0008-r0/requests.parquet")
    b = read_table(simulate(small, tmp_path, "e2", think) / "points/p004-n0008-r0/requests.parquet")
    assert a.equals(b)
    from harness.dataset.thinktime import PauseTable, ThinkTime

    table = PauseTable(ThinkTime(kind="exponential", mean_s=3, seed=5))
    for row in a[a["turn"] > 1].itertuples():
        assert row.think_s == table.pause(row.conversation, row.turn)
        assert row.gap_s == pytest.approx(row.think_s, abs=1e-9)


def test_the_prediction_claims_file_is_valid_and_names_real_profiles():
    from harness.gate.claims import load_claims
    from harness.paths import CLAIMS_DIR
    from harness.serve.profiles import load_profile

    claims = load_claims(CLAIMS_DIR / "think-time-predictions.yaml")
    assert all(c.text.startswith("PREDICTION") for c in claims.claims)
    for arm in claims.arms.values():
        for name in arm.profiles:
            assert load_profile(name).name == name
