"""Slurm settings: Slurm's time formats, gres, the config file, and the CLI's strictness."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from harness.cli import cli
from harness.cluster.options import parse_time, slurm_options
from harness.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("30", 30),
        ("1:30", 2),  # MM:SS rounds up, as Slurm does
        ("2:00:00", 120),
        ("1-0", 1440),
        ("1-02:30", 1590),
        ("0-00:00:59", 1),
    ],
)
def test_slurm_time_formats_become_minutes(text, minutes):
    assert parse_time(text) == minutes


@pytest.mark.parametrize("text", ["", "0", "1h", "1:2:3:4", "-5", "00:00:00"])
def test_bad_slurm_time_is_an_error_naming_it(text):
    with pytest.raises(ConfigError, match="--slurm-time"):
        parse_time(text)


def test_gres_defaults_from_the_profile_gpus_and_none_drops_it():
    assert slurm_options().gres_for(8) == "gpu:8"
    assert slurm_options().gres_for(0) is None
    assert slurm_options(gres="gpu:h200:4").gres_for(8) == "gpu:h200:4"
    assert slurm_options(gres="none").gres_for(8) is None
    with pytest.raises(ConfigError, match="--slurm-gres 'gpu'"):
        slurm_options(gres="gpu")


def test_config_file_values_and_command_line_wins(tmp_path):
    conf = tmp_path / "site.yaml"
    conf.write_text(
        "partition: gpu\naccount: lab\ntime: '12:00:00'\ncpus_per_task: 16\n"
        "setup: ['module load cuda/12.4']\n"
    )
    opts = slurm_options(config=conf, partition="debug")
    assert (opts.partition, opts.account, opts.time_min) == ("debug", "lab", 720)
    assert opts.cpus_per_task == 16 and opts.setup == ("module load cuda/12.4",)
    assert opts.gres_for(8) == "gpu:8"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("partition: gpu\nqueue: x\n", "unknown key"),
        ("time: soon\n", "time 'soon'"),
        ("cpus_per_task: 0\n", "cpus_per_task"),
        ("setup: module load x\n", "setup"),
        ("partition: 'a b'\n", "partition 'a b'"),
        ("[1, 2]\n", "expected a mapping"),
    ],
)
def test_bad_config_file_is_an_error_naming_file_and_key(tmp_path, text, message):
    conf = tmp_path / "site.yaml"
    conf.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        slurm_options(config=conf)
    assert str(conf) in str(info.value)


def test_slurm_options_without_slurm_executor_are_refused():
    runner = CliRunner()
    done = runner.invoke(cli, ["sweep", "--profile", "cpu-tiny", "--slurm-partition", "gpu"])
    assert done.exit_code == 2 and "--slurm-partition: only with --executor slurm" in done.output
    done = runner.invoke(cli, ["sweep", "--profile", "cpu-tiny", "--no-wait"])
    assert done.exit_code == 2 and "--no-wait needs --executor slurm" in done.output
    done = runner.invoke(
        cli, ["nightly", "--profiles", "cpu-tiny", "--build", "x", "--slurm-time", "5"]
    )
    assert done.exit_code == 2 and "--slurm-time: only with --executor slurm" in done.output


def test_bad_slurm_value_fails_before_anything_is_submitted(tmp_path):
    done = CliRunner().invoke(
        cli,
        ["sweep", "--profile", "cpu-tiny", "--executor", "slurm", "--slurm-time", "1h"],
    )
    assert isinstance(done.exception, ConfigError)
    assert "--slurm-time '1h'" in str(done.exception)
