"""A point served by the simulated server carries the same 80 % prediction interval as the
offline simulator's (`fidelity.interval80`), from the sigmas the server logs among its facts
(issue 24, item 4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import engines
from harness.serve.profiles import load_profile
from harness.sim import config as sim_config
from harness.sim.config import find_calibration, load_calibration, resolve_calibration
from harness.sim.config import setup_from_profile as offline_setup
from harness.sim.intervals import interval80
from harness.sim.serve.interval import served_interval80
from harness.sim.serve.process import SimServer
from harness.sim.serve.server import ServeOptions, build_state, facts_line, read_facts

METRICS = {
    "occupancy": 7.5,
    "interactivity": 40.0,
    "throughput_per_gpu": 8000.0,
    "p99_ttft_ms": 9.0,
}


@pytest.fixture(scope="module")
def facts() -> dict[str, dict]:
    """The facts of a server started with the default calibration and with `none`."""
    return {
        name: build_state(
            ServeOptions(profile="hisparse384", tokenizer="tiny:tokenizer", calibration=cal)
        ).facts
        for name, cal in (("default", None), ("none", Path("none")))
    }


def _server(tmp_path: Path, *lines: str) -> SimServer:
    log = tmp_path / "server.log"
    log.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return SimServer(load_profile("hisparse384"), log_path=log, time_scale=2.0)


def test_the_server_logs_the_sigmas_of_the_calibration_it_picked(facts):
    path = find_calibration("glm-5.3", "h200")  # picked by the profile's model and GPU
    assert path is not None and facts["default"]["calibration"] == str(path)
    by_profile = load_calibration(path).data["intervals"]["sigma_log_by_profile"]
    assert facts["default"]["interval_sigma"] == by_profile["hisparse384"]
    assert facts["none"]["calibration"] is None and facts["none"]["interval_sigma"] is None


def test_a_served_point_gets_the_offline_interval(tmp_path, facts):
    header = "# repro: python -m harness.cli sim serve --profile hisparse384"
    server = _server(
        tmp_path, header, "sim serve: profile hisparse384", facts_line(facts["default"])
    )
    prof = load_profile("hisparse384")
    setup = offline_setup(prof, resolve_calibration(None, prof.model), {})
    expected = setup.interval80(METRICS)  # what `repro simulate` writes for these metrics
    assert expected and set(expected) == {"occupancy", "interactivity", "throughput_per_gpu"}
    got = served_interval80(server, METRICS)
    assert got.keys() == expected.keys()
    for name, (low, high) in expected.items():
        assert got[name] == pytest.approx([low, high], rel=1e-12)
        assert low < METRICS[name] < high


def test_no_interval_uncalibrated_without_facts_or_for_a_real_server(tmp_path, facts):
    assert served_interval80(_server(tmp_path, facts_line(facts["none"])), METRICS) == {}
    assert served_interval80(_server(tmp_path, "a log without facts"), METRICS) == {}
    assert served_interval80(_server(tmp_path, "sim serve: facts {cut sh"), METRICS) == {}
    missing = SimServer(load_profile("hisparse384"), log_path=tmp_path / "no.log", time_scale=2)
    assert served_interval80(missing, METRICS) == {}
    # the run layer asks the engine: only the simulated server's predicts an interval
    real_server = missing  # whatever the server, a real engine predicts nothing
    assert engines.get("vllm").interval80(real_server, METRICS) == {}
    assert engines.get("url").interval80(real_server, METRICS) == {}
    calibrated = _server(tmp_path, facts_line(facts["default"]))
    assert (
        engines.get("sim-http").interval80(calibrated, METRICS)
        == served_interval80(calibrated, METRICS)
        != {}
    )


def test_interval_needs_a_positive_value():
    sigma = {"occupancy": 0.1, "interactivity": 0.2}
    out = interval80(sigma, {"occupancy": 0.0, "interactivity": None})
    assert out == {}
    assert read_facts(["x", 'sim serve: facts {"a": 1}', 'sim serve: facts {"a": 2}']) == {"a": 1}


def test_a_server_without_a_matching_calibration_runs_uncalibrated(tmp_path, monkeypatch):
    empty = tmp_path / "calibrations"
    empty.mkdir()
    find = sim_config.find_calibration
    monkeypatch.setattr(sim_config, "find_calibration", lambda m, g: find(m, g, empty))
    facts = build_state(ServeOptions(profile="hisparse384", tokenizer="tiny:tokenizer")).facts
    assert facts["calibration"] is None and facts["interval_sigma"] is None


def test_a_server_with_a_parameter_moved_off_the_fit_logs_it_and_predicts_no_interval(tmp_path):
    opts = ServeOptions(
        profile="hisparse384", tokenizer="tiny:tokenizer", overrides=("sim.hbm_eff=0.7",)
    )
    facts = build_state(opts).facts
    assert facts["calibration"] == str(find_calibration("glm-5.3", "h200"))
    assert facts["modified"] == {"hbm_eff": 0.7} and facts["params"]["hbm_eff"] == 0.7
    assert facts["interval_sigma"] is None
    assert served_interval80(_server(tmp_path, facts_line(facts)), METRICS) == {}
