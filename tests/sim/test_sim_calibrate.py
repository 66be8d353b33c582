"""The calibration machinery: it recovers known parameters, and it only fits MTP3 targets."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from harness.sim import calibrate as cal
from harness.sim.config import load_calibration

SETS = ("sweep.points=[[1,2],[4,6]]", "sweep.dataset_offset=0", "sweep.scrape_interval_s=2")


def test_fit_recovers_the_parameters_that_made_the_targets(tmp_path: Path):
    recipe = tmp_path / "small.yaml"
    recipe.write_text(
        "number: 8\nnum_turns: 2\nfirst_turn_length: 40000\nsubsequent_turn_length: 400\n"
    )
    truth = {"prefill_eff": 0.2, "acceptance_length": 2.2}
    made = cal.predict("hisparse384", truth, str(recipe), overrides=SETS)
    points = {label: {m: m_[m] for m in cal.METRICS} for label, m_ in made.items()}
    target = cal.Target("hisparse384", "synthetic", points, str(recipe), SETS)
    params, rows, evals = cal.fit([target], max_evals=60, names=tuple(truth), echo=lambda _: None)
    assert evals <= 60
    assert params["prefill_eff"] == pytest.approx(0.2, rel=0.05)
    assert params["acceptance_length"] == pytest.approx(2.2, rel=0.03)
    assert max(abs(r["rel_error"]) for r in rows) < 0.03


def test_targets_are_the_two_mtp3_series_only():
    targets = cal.load_targets()
    assert sorted(t.profile for t in targets) == ["hisparse384", "offload512"]
    assert all("MTP3" in t.series for t in targets)
    assert all(set(t.points) == {"c1", "c8", "c16", "c24", "c32"} for t in targets)


def test_more_than_seven_parameters_are_refused():
    assert len(cal.FITTED) <= 7
    with pytest.raises(Exception, match="at most 7"):
        cal.fit([], names=(*cal.FITTED, "pcie_eff", "step_overhead_ms"))


def test_written_calibration_loads_with_provenance(tmp_path: Path):
    out = tmp_path / "c.yaml"
    rows = [
        {
            "profile": "hisparse384",
            "label": "c1",
            "metric": "occupancy",
            "target": 1.0,
            "simulated": 1.0,
            "rel_error": 0.0,
        }
    ]
    cal.write_calibration(out, {"prefill_eff": 0.2}, rows, 3)
    loaded = load_calibration(out)
    assert (loaded.model, loaded.gpu, loaded.params["prefill_eff"]) == ("glm-5.3", "h200", 0.2)
    data = yaml.safe_load(out.read_text())
    assert data["fitted"] == ["prefill_eff"]  # the others at the values the fit ran with
    assert loaded.params["step_overhead_ms"] == 1.0 and set(data["meaning"]) == set(data["params"])
    assert data["bounds"]["prefill_eff"] == [0.15, 0.6] and data["residency"] == cal.FIT_RESIDENCY
    prov = yaml.safe_load(out.read_text())["provenance"]
    assert prov["fitted_to"] == "launch/published/glm53-blog.yaml" and prov["evaluations"] == 3


def test_loss_adds_a_hinge_only_outside_the_target_band():
    def row(metric: str, simulated: float) -> dict:
        return {"metric": metric, "target": 100.0, "simulated": simulated}

    inside = [row("interactivity", 110.0)]  # +10 %: inside the 15 % band
    assert cal.loss(inside) == pytest.approx(math.log(1.1) ** 2)
    outside = [row("occupancy", 120.0)]  # +20 %: 0.0812 past the 10 % band
    past = math.log(1.2) - math.log(1.1)
    expected = cal.WEIGHTS["occupancy"] * math.log(1.2) ** 2 + cal.HINGE * past**2
    assert cal.loss(outside) == pytest.approx(expected)


def test_a_stalled_engine_is_an_infeasible_point_not_a_crash(monkeypatch: pytest.MonkeyPatch):
    def fake_errors(targets: list, params: dict) -> list[dict]:
        if params["prefill_eff"] > 0.45:
            raise RuntimeError("simulator stalled at t=1.000s")
        got = 100.0 * params["prefill_eff"] / 0.25  # exact at prefill_eff = 0.25
        return [{"metric": "interactivity", "target": 100.0, "simulated": got, "rel_error": 0}]

    monkeypatch.setattr(cal, "errors", fake_errors)
    said: list[str] = []
    params, _, evals = cal.fit(
        [], max_evals=40, names=("prefill_eff",), start={"prefill_eff": 0.5}, echo=said.append
    )
    assert any("stalled" in line for line in said)
    assert params["prefill_eff"] == pytest.approx(0.25, rel=0.05)
    assert evals <= 40
