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
    points = {label: {m: float(m_[m] or 0.0) for m in cal.METRICS} for label, m_ in made.items()}
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
    cal.write_calibration(out, {"prefill_eff": 0.2}, rows, 3, grads={})
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


def _row(profile: str, label: str, metric: str, err: float) -> dict:
    return {
        "profile": profile,
        "label": label,
        "metric": metric,
        "target": 100.0,
        "simulated": 100.0 * math.exp(err),
        "rel_error": math.exp(err) - 1,
    }


def test_parameter_covariance_by_hand():
    # one parameter, two interactivity points with log-gradients 1 and 2, residual sigma 0.1:
    # J^T W J = (1^2 + 2^2) / 0.1^2 = 500, so the parameter's variance is 1 / 500 = 0.002
    rows = [_row("a", "c1", "interactivity", 0.0), _row("a", "c8", "interactivity", 0.0)]
    grads = {"a": {"c1": {"interactivity": [1.0]}, "c8": {"interactivity": [2.0]}}}
    cov = cal.parameter_covariance(rows, grads, {"interactivity": 0.1})
    assert cov == [[pytest.approx(0.002)]]


def test_interval_sigma_adds_parameter_and_residual_variance_by_hand():
    # three interactivity residuals 0.1, -0.1, 0.2 (log): mean square 0.02, one fitted
    # parameter -> x 3 / 2 = 0.03, plus the read-off error 0.005^2 = 0.000025: s^2 = 0.030025
    errs = {"c1": 0.1, "c8": -0.1, "c16": 0.2}
    rows = [_row("a", label, "interactivity", e) for label, e in errs.items()]
    grads = {
        "a": {label: {m: [1.0] for m in cal.METRICS} for label in errs},
        "b": {"c1": {m: [3.0] for m in cal.METRICS}},  # a held-out arm, three times as sensitive
    }
    out = cal.interval_sigmas(rows, ("prefill_eff",), grads)
    s2 = 0.030025
    # C = 1 / (3 x 1^2 / s^2) = s^2 / 3 = 0.0100083
    assert out["sigma_log_by_profile"]["a"]["interactivity"] == pytest.approx(
        math.sqrt(s2 / 3 + s2), abs=1e-5
    )
    assert out["sigma_log_by_profile"]["b"]["interactivity"] == pytest.approx(
        math.sqrt(9 * s2 / 3 + s2), abs=1e-5
    )
    # prefill_eff's range is 0.6 - 0.15 = 0.45: sd sqrt(C) x 0.45 = 0.1000417 x 0.45
    assert out["parameter_sd"]["prefill_eff"] == pytest.approx(math.sqrt(s2 / 3) * 0.45, abs=1e-5)
    # the fallback for other profiles: the median over the arms (two arms: the larger)
    assert out["sigma_log"]["interactivity"] == out["sigma_log_by_profile"]["b"]["interactivity"]


def test_a_run_takes_its_own_arms_interval(tmp_path: Path):
    from harness.serve.profiles import load_profile
    from harness.sim.config import setup_from_profile

    out = tmp_path / "c.yaml"
    rows = [_row("hisparse384", "c1", "occupancy", 0.0)]
    grads = {"hisparse384": {"c1": {m: [0.0] for m in cal.METRICS}}}
    cal.write_calibration(out, {"prefill_eff": 0.2}, rows, 3, grads=grads)
    data = yaml.safe_load(out.read_text())
    data["intervals"]["sigma_log_by_profile"]["offload512"] = {"occupancy": 0.5}
    out.write_text(yaml.safe_dump(data))
    loaded = load_calibration(out)
    own = setup_from_profile(load_profile("offload512"), loaded)
    other = setup_from_profile(load_profile("hisparse384-nomtp"), loaded)
    assert own.interval_sigma == {"occupancy": 0.5}
    assert other.interval_sigma == data["intervals"]["sigma_log"]
    data["intervals"]["sigma_log_by_profile"]["offload512"] = {"occupancy": -1}
    out.write_text(yaml.safe_dump(data))
    with pytest.raises(Exception, match="sigma_log_by_profile.offload512.occupancy"):
        load_calibration(out)


def test_occupancy_is_read_as_a_scraper_of_unknown_phase_would() -> None:
    from harness.measurement import Sample

    # 1 s samples of two engines' running gauges, summed per scrape: 2, 4, 0, 6, 2, 0, 8, 0, 0
    per_second = [2, 4, 0, 6, 2, 0, 8, 0, 0]
    samples = [
        Sample(float(t), 50.0 + t, "vllm:num_requests_running", {"engine": str(e)}, v / 2)
        for t, v in enumerate(per_second)
        for e in (0, 1)
    ]
    # period 3: phase 0 reads (2 + 6 + 8) / 3, phase 1 (4 + 2) / 2, phase 2 sees nothing
    mean, sd = cal.phase_read_occupancy(samples, 3.0)
    assert mean == pytest.approx((16 / 3 + 3.0) / 2)
    assert sd == pytest.approx(abs(math.log(16 / 3) - math.log(3.0)) / 2)
    assert cal.phase_read_occupancy(samples[:0], 30.0) is None


def test_the_occupancy_sigma_carries_the_scrape_phase_spread() -> None:
    rows = [
        {"metric": "occupancy", "target": 10.0, "simulated": 10.0, "phase_sd": 0.06},
        {"metric": "occupancy", "target": 10.0, "simulated": 10.0, "phase_sd": 0.08},
    ]
    # no residual, no read-off error: the phase spread alone, as a root mean square
    assert cal.residual_sigmas(rows, 0)["occupancy"] == pytest.approx(math.sqrt(0.005))
