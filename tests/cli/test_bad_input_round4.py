"""Issue 26, fourth round: the gaps an audit found after round 3. A profile file whose name
cannot be a run id, a negative or zero count, are a one-line error (exit 2) before any work;
outputs are written to a temporary name and renamed."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support.cli_errors import one_error_line
from support.crafted_runs import write_run

from harness import results
from harness.cli import cli
from harness.cluster import k8s
from harness.dataset.rotation import conversations_for_points, fresh_size
from harness.errors import ConfigError, ReproError
from harness.names import NAME_RULE
from harness.paths import PROFILES_DIR
from harness.run.request import SweepRequest
from harness.serve.profiles import load_profile
from harness.sim import calibrate

REPRO = [sys.executable, "-c", "from harness.cli import main; main()"]


def repro(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [*REPRO, *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


# ------------------------------------------------------------------ names


def test_a_sweep_run_id_is_checked_by_the_one_name_validator() -> None:
    with pytest.raises(ConfigError, match="a name is letters, digits"):
        SweepRequest("offload512", run_id="../x")
    assert SweepRequest("offload512", run_id="a.b_c+d-1").run_id == "a.b_c+d-1"


def _profile_file(folder: Path, stem: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.yaml"
    shutil.copy(PROFILES_DIR / "offload512.yaml", path)
    return path


BAD_STEMS = {
    "markup": "a<b>$x",
    "space": "two words",
    "quote": "it's",
    "dot": ".hidden",
    "dash": "-rf",
    "long": "p" * 100,  # a name, but `sim-<name>-<stamp>` would be longer than a name may be
}


@pytest.mark.parametrize("stem", BAD_STEMS.values(), ids=BAD_STEMS.keys())
def test_a_profile_file_whose_name_cannot_be_a_run_id_is_refused_where_it_is_read(
    tmp_path: Path, stem: str
) -> None:
    path = _profile_file(tmp_path, stem)
    with pytest.raises(ConfigError, match="a name is letters, digits") as caught:
        load_profile(str(path))
    assert str(caught.value).startswith(f"{path}: profile name ")


@pytest.mark.parametrize(
    "command",
    [["simulate", "--points", "c1"], ["sweep", "--dry-run", "--allow-incoherent"]],
    ids=["simulate", "sweep"],
)
def test_a_profile_file_whose_name_cannot_be_a_run_id_stops_the_command(
    tmp_path: Path, command: list[str]
) -> None:
    path = _profile_file(tmp_path / "profiles", BAD_STEMS["markup"])
    out = tmp_path / "out"
    result = repro(*command, "--profile", str(path), "--out", str(out))
    # before: a run directory `runs list` calls damaged (simulate), a dry run that plans it (sweep)
    one_error_line(result, str(path), "a name is letters, digits")
    assert not out.exists()


def test_a_profile_file_with_a_safe_name_still_simulates(tmp_path: Path) -> None:
    path = _profile_file(tmp_path / "profiles", "my-arm.v2")
    out = tmp_path / "out"
    result = repro("simulate", "--profile", str(path), "--points", "c1", "--out", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    (run,) = out.iterdir()
    assert run.name.startswith("sim-my-arm.v2-")
    listed = repro("runs", "list", "--out", str(out))
    assert " complete " in listed.stdout and " damaged " not in listed.stdout, listed.stdout


def test_a_parity_run_id_derived_from_a_long_run_id_is_refused(tmp_path: Path) -> None:
    real = write_run(tmp_path / "real", "r" * 128, [{"parallel": 1, "number": 1}])
    out = tmp_path / "out"
    result = repro("simulate", "parity", "--fit", str(real), "--run", str(real), "--out", str(out))
    one_error_line(result, "sim-" + "r" * 128, NAME_RULE.split(" (")[0], "--run-id")
    assert not out.exists()


# ------------------------------------------------------------------ numeric ranges

VERIFY = ["dataset", "verify", "x.json", "--tokenizer", "tiny:tokenizer"]
BUILD = ["dataset", "build", "openhands-offline", "--output-path", "x.json"]
REFUSED_NUMBERS = [
    (["dataset", "plan"], "--conversations", "-1"),
    (["dataset", "plan"], "--conversations", "0"),
    (["dataset", "plan"], "--offset", "-3"),
    (["dataset", "plan"], "--numbers", "0"),
    (["dataset", "plan"], "--numbers", "4,100001"),  # rotation lists are built in memory
    (["dataset", "plan"], "--conversations", "99999999999999999999"),  # before: a traceback
    (BUILD, "--sweep-numbers", "100001"),
    (VERIFY, "--first-turn-length", "0"),
    (VERIFY, "--subsequent-turn-length", "-1"),
    (VERIFY, "--output-tokens", "-1"),
    (VERIFY, "--tolerance", "-1"),
    (BUILD, "--number", "-1"),
    (BUILD, "--number", "0"),
    (BUILD, "--number", "100001"),  # before: a build that ran for hours
    (BUILD, "--num-turns", "0"),
    (BUILD, "--first-turn-length", "0"),
    (BUILD, "--subsequent-turn-length", "-1"),
    (BUILD, "--max-rows", "0"),
    (BUILD, "--max-real-first-turn-frac", "0"),
    (BUILD, "--max-real-first-turn-frac", "1.5"),
    (BUILD, "--output-tokens-estimate", "-1"),
    (BUILD, "--tolerance", "-1"),
    (BUILD, "--seed", "-5"),  # before: a numpy traceback with --pad-source random
    (BUILD, "--sweep-offset", "-5"),
    (BUILD, "--sweep-numbers", "0"),
    (["simulate", "calibrate", "--out", "x.yaml"], "--max-evals", "0"),
    (["simulate", "calibrate", "--out", "x.yaml"], "--max-evals", "-4"),
]


@pytest.mark.parametrize(
    ("command", "option", "value"),
    REFUSED_NUMBERS,
    ids=[f"{' '.join(c[:2])} {o} {v}" for c, o, v in REFUSED_NUMBERS],
)
def test_numbers_out_of_range_are_refused_naming_the_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], option: str, value: str
) -> None:
    monkeypatch.chdir(tmp_path)  # nothing a command might write lands in the tree
    result = CliRunner().invoke(cli, [*command, option, value])
    # before: exit 0 and a plan of nonsense (plan), or an error blaming the recipe file (build)
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert f"Invalid value for '{option}'" in result.output, result.output
    assert list(tmp_path.iterdir()) == []


def test_dataset_plan_takes_the_smallest_meaningful_values() -> None:
    result = CliRunner().invoke(
        cli, ["dataset", "plan", "--offset", "0", "--conversations", "1", "--numbers", "1"]
    )
    assert result.exit_code == 0, result.output
    assert "1 conversations, start offset 0:" in result.output


# ------------------------------------------------------------------ atomic outputs

ROWS = [
    {
        "profile": "hisparse384",
        "label": "c1",
        "metric": "occupancy",
        "target": 1.0,
        "simulated": 1.0,
        "rel_error": 0.0,
    }
]


def _write_calibration(path: Path) -> None:
    # no gradients: the intervals' sensitivity sweeps (16 s) are not what these tests are about
    calibrate.write_calibration(path, {"prefill_eff": 0.2}, ROWS, 3, grads={})


def _write_k8s(path: Path) -> None:
    k8s.write({path.name: [{"kind": "ConfigMap", "data": {"k": "v" * 10_000}}]}, path.parent)


WRITERS = {"calibrate --out": _write_calibration, "k8s manifests": _write_k8s}


@pytest.mark.parametrize("write", WRITERS.values(), ids=WRITERS.keys())
def test_outputs_replace_the_old_file_by_rename(tmp_path: Path, write: Any) -> None:
    path = tmp_path / "out.yaml"
    path.write_text("old: 1\n")
    before = path.stat().st_ino
    write(path)
    # a reader that opened the old file keeps it whole; before: rewritten in place (same inode)
    assert path.stat().st_ino != before and path.read_text() != "old: 1\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.yaml"]  # no temporary file left


@pytest.mark.parametrize("write", WRITERS.values(), ids=WRITERS.keys())
def test_an_interrupted_output_write_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write: Any
) -> None:
    path = tmp_path / "out.yaml"
    path.write_text("old: 1\n")

    def cut(fd: int) -> None:  # Ctrl-C after the bytes, before the rename
        raise KeyboardInterrupt

    monkeypatch.setattr(results.os, "fsync", cut)
    with pytest.raises(KeyboardInterrupt):
        write(path)
    assert path.read_text() == "old: 1\n"  # before: the new text was already in place
    assert [p.name for p in tmp_path.iterdir()] == ["out.yaml"]


# ------------------------------------------------------------------ a plan that cannot hang


def _fresh_by_sets(offset: int, numbers: list[int]) -> int:
    """fresh_size as the sets of conversations each point replays define it (the reference)."""
    total = sum(numbers)
    for size in range(max(total, 1), offset + total + 1):
        seen: set[int] = set()
        for convs in conversations_for_points(size, offset, numbers):
            if len(set(convs)) < len(convs) or set(convs) & seen:
                break
            seen |= set(convs)
        else:
            return size
    return offset + total


def test_fresh_size_agrees_with_the_conversations_each_point_replays() -> None:
    rng = random.Random(26)
    cases = [(52, [4, 16, 32, 48, 64]), (2, [2, 8, 16]), (0, [1]), (7, [3])]
    cases += [(rng.randrange(0, 60), [rng.randrange(1, 20) for _ in range(rng.randrange(1, 6))])
              for _ in range(300)]  # fmt: skip
    for offset, numbers in cases:
        assert fresh_size(offset, numbers) == _fresh_by_sets(offset, numbers), (offset, numbers)


def test_dataset_plan_at_its_largest_offset_answers_in_seconds() -> None:
    started = time.monotonic()
    result = CliRunner().invoke(cli, ["dataset", "plan", "--offset", "100000"])
    # before: over an hour (every size up to the offset tried with lists of every index)
    assert result.exit_code == 0, result.output
    assert time.monotonic() - started < 20
    assert "a dataset of 100100 conversations gives every point fresh" in result.output


def test_calibrate_refuses_an_unwritable_out_before_the_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "afile").write_text("")
    out = tmp_path / "afile" / "c.yaml"

    def no_fit(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the fit started")

    monkeypatch.setattr(calibrate, "fit", no_fit)
    result = CliRunner().invoke(
        cli, ["simulate", "calibrate", "--max-evals", "1", "--out", str(out)]
    )
    # before: the fit ran to its end, then the write failed and its result was lost
    assert isinstance(result.exception, ReproError), (result.exception, result.output)
    assert str(result.exception).startswith(f"{out}: cannot write there (a file is in the way")
