"""The engine options of `repro sweep` come from the registry: the flags, their help, the one
refusal, and the command line a Slurm job re-runs (`options_argv`), which must give the engine
the same typed arguments as the request it was built from."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from harness import engines
from harness.cli import cli
from harness.cli import sweep as sweep_cli
from harness.engines.sim_http import SimHttpArgs, SimHttpEngine
from harness.errors import ConfigError
from harness.run.sweep import SweepRequest


def test_every_declared_flag_is_a_sweep_option_with_its_engines_help():
    help_text = " ".join(CliRunner().invoke(cli, ["sweep", "--help"]).output.split())
    flags = [o for o in engines.declared_options() if o.set_prefix is None]
    assert {o.flag for o in flags} >= {"--url", "--time-scale", "--sim-arg"}
    for option in flags:
        assert option.flag in help_text
    assert "--time-scale K --engine sim: virtual time" in help_text
    assert "--url TEXT Attach to a running" in help_text  # --url chooses its engine: no prefix


def test_options_are_split_from_the_profiles_set_items():
    profile_sets, engine_sets = engines.split_overrides(
        ["serve.max-num-seqs=8", "sim.hbm_gib=10", "sweep.max_tokens=8", "sim.pcie_gbps=1"]
    )
    assert profile_sets == ["serve.max-num-seqs=8", "sweep.max_tokens=8"]
    assert engine_sets == {"sim_overrides": ["sim.hbm_gib=10", "sim.pcie_gbps=1"]}


@pytest.mark.parametrize(
    "options",
    [
        {"url": "http://127.0.0.1:9"},
        {"engine": "sim", "time_scale": 4.0, "sim_args": ["--fail-rate=0.1", "--die-after=9"]},
    ],
)
def test_the_argv_a_job_reruns_gives_the_same_engine_args(options, monkeypatch, tmp_path):
    request = SweepRequest("cpu-tiny", **options)
    argv = ["sweep", "--profile", "cpu-tiny", "--no-report"]
    argv += ["--engine", request.engine, *engines.options_argv(request.engine_options)]
    seen: list[SweepRequest] = []

    def record(req: SweepRequest) -> Path:  # the command line's request, not run here
        seen.append(req)
        return tmp_path

    monkeypatch.setattr(sweep_cli, "run_sweep", record)
    done = CliRunner().invoke(cli, argv)
    assert done.exit_code == 0, done.output
    engine, args = seen[0].engine_choice()
    assert (engine, args) == request.engine_choice()
    if "time_scale" in options:
        assert args == SimHttpArgs(time_scale=4.0, sim_args=["--fail-rate=0.1", "--die-after=9"])


def test_an_option_given_twice_the_same_way_by_two_engines_is_shared():
    class Twin(SimHttpEngine):
        kind = "sim-twin"
        cli_name = "twin"

    try:
        engines.register(Twin())
        assert [e.kind for e in engines.accepting("time_scale")] == ["sim-http", "sim-twin"]
        with pytest.raises(
            ConfigError, match="^--time-scale applies to --engine sim or --engine twin only"
        ):
            SweepRequest("cpu-tiny", time_scale=2.0)
    finally:
        engines.unregister("sim-twin")
