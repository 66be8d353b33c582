"""Issue 17, second round of hostile input: each case is one line naming the file, key or value,
exit 2 (usage / config / environment), never a traceback, and nothing is written first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.cli_errors import one_error_line

from harness.capacity.formulas import parse_seq_range
from harness.cluster.k8s import render
from harness.coherence.probes import load_probe_set
from harness.errors import ConfigError, ReproError
from harness.gate.history import History
from harness.paths import cache_dir
from harness.results import atomic_write_text
from harness.serve.profiles import load_profile
from harness.sim.config import load_calibration

REPRO = [sys.executable, "-c", "from harness.cli import main; main()"]


def repro(*args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **env}
    return subprocess.run(
        [*REPRO, *args], capture_output=True, text=True, timeout=timeout, env=full_env, check=False
    )


@pytest.fixture
def blocker(tmp_path: Path) -> Path:
    path = tmp_path / "a-file"
    path.write_text("not a folder")  # root writes anywhere, but never below a file
    return path


# ------------------------------------------------------------------ YAML: duplicate keys, tabs


def test_profile_with_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text("extends: cpu-tiny\nserve:\n  max-num-seqs: 4\n  max-num-seqs: 8\n")
    with pytest.raises(ConfigError, match=r"line 4, column 3: key 'max-num-seqs' given twice"):
        load_profile(str(path))


def test_profile_with_a_tab_is_one_line_naming_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "tab.yaml"
    path.write_text("extends: cpu-tiny\nserve:\n\tmax-num-seqs: 4\n")
    result = repro("profiles", "show", str(path))
    one_error_line(result, str(path), "line 3, column 1", "'\\t'")


def test_set_value_that_is_bad_yaml_is_one_line() -> None:
    result = repro("profiles", "show", "cpu-tiny", "--set", "serve.max-num-seqs=[1")
    one_error_line(result, "serve.max-num-seqs=[1", "not valid YAML (line 1, column 3")


def test_probe_set_not_utf8_or_with_a_duplicate_key(tmp_path: Path) -> None:
    (tmp_path / "bad-v1.yaml").write_bytes(b"\xff\xfe garbage")
    with pytest.raises(ConfigError, match=r"bad-v1\.yaml: cannot read probe set"):
        load_probe_set("bad-v1", tmp_path)
    (tmp_path / "bad-v1.yaml").write_text(
        "name: bad\nversion: 1\napi: completions\nmax_tokens: 32\nmax_tokens: 8\n"
        "ignore_eos: true\nprobes: [{id: a, prompt: x}]\n"
    )
    with pytest.raises(ConfigError, match=r"key 'max_tokens' given twice"):
        load_probe_set("bad-v1", tmp_path)


def test_calibration_with_bad_yaml_or_bytes(tmp_path: Path) -> None:
    bad = tmp_path / "cal.yaml"
    bad.write_text("schema: repro.sim-calibration/1\n\tparams: {}\n")
    with pytest.raises(ConfigError, match=r"cal\.yaml: not valid YAML \(line 2, column 1"):
        load_calibration(bad)
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match=r"cal\.yaml: cannot read calibration file"):
        load_calibration(bad)


# ------------------------------------------------------------------ profile values


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("sweep.points=[[true,2]]", "key 'sweep.points.0.0'"),
        ("sweep.points=[[1,2],[4,8],[1,2]]", "[1, 2] given twice"),
        ("model=", "key 'model'"),
        ("port=99999", "key 'port'"),
    ],
)
def test_profile_values_that_were_silently_taken(override: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_profile("cpu-tiny", [override])
    assert expected in str(info.value) and override in str(info.value)


# ------------------------------------------------------------------ numbers and ports


@pytest.mark.parametrize(
    "args",
    [
        ["capacity", "--hbm-gib", "nan"],
        ["capacity", "--hbm-gib", "inf"],
        ["capacity", "--host-pool-gib", "nan"],
        ["capacity", "--system-ram-gib", "nan"],
        ["capacity", "--hbm-gib", "1e308"],
        ["doctor", "--profile", "cpu-tiny", "--port", "99999"],
        ["coherence", "--profile", "cpu-tiny-mtp", "--dry-run", "--port", "0"],
        ["sim", "serve", "--profile", "hisparse384", "--port", "70000"],
        ["sim", "serve", "--profile", "hisparse384", "--port", "18779", "--time-scale", "inf"],
    ],
    ids=lambda a: " ".join(a[:1] + a[-2:]),
)
def test_numbers_out_of_range_are_refused_up_front(args: list[str]) -> None:
    one_error_line(repro(*args, timeout=60), args[-2], args[-1])


def test_huge_seq_range_is_refused_without_building_it() -> None:
    # 10**13 lengths: building the list first raised MemoryError (10**9 was OOM-killed)
    with pytest.raises(ConfigError, match=r"10,000,000,000,000 lengths; at most 100,000"):
        parse_seq_range("1:10000000000000:1")


# ------------------------------------------------------------------ environment and paths


def test_repro_cache_on_a_file_names_the_variable(
    blocker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REPRO_CACHE", str(blocker))
    with pytest.raises(ConfigError, match=rf"REPRO_CACHE={blocker}: cannot create it"):
        cache_dir()


def test_unwritable_home_names_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REPRO_CACHE", raising=False)
    monkeypatch.setenv("HOME", "/proc/no-home")
    with pytest.raises(
        ConfigError, match=r"/proc/no-home/\.cache/repro \(from HOME; set REPRO_CACHE\)"
    ):
        cache_dir()


def test_history_database_on_a_folder(tmp_path: Path) -> None:
    with pytest.raises(ReproError, match=rf"{tmp_path}: cannot open the history database"):
        History.open(tmp_path)


def test_atomic_write_names_the_target_not_its_temp_file(blocker: Path) -> None:
    target = Path("/proc/acc.jsonl")
    with pytest.raises(OSError) as info:
        atomic_write_text(target, "x\n")
    assert info.value.filename == str(target)
    with pytest.raises(OSError) as info:
        atomic_write_text(blocker / "x.md", "x\n")
    assert info.value.filename == str(blocker / "x.md")
    assert "a file is in the way" in str(info.value.strerror)


def test_runs_list_out_that_is_not_a_folder(blocker: Path, tmp_path: Path) -> None:
    one_error_line(repro("runs", "list", "--out", str(blocker)), str(blocker), "not a folder")
    missing = tmp_path / "typo"
    one_error_line(repro("runs", "list", "--out", str(missing)), str(missing), "no such folder")


def test_k8s_claim_name_is_never_rewritten() -> None:
    with pytest.raises(ConfigError, match=r"--results-claim 'UPPER_bad'.*e\.g\. 'upper-bad'"):
        render(load_profile("cpu-tiny"), claim="UPPER_bad")
    with pytest.raises(ConfigError, match=r"--results-size '0Gi'"):
        render(load_profile("cpu-tiny"), size="0Gi")


def test_coherence_against_unknown_names_the_option() -> None:
    result = repro("coherence", "--profile", "cpu-tiny-mtp", "--against", "nope", "--dry-run")
    line = one_error_line(result, "'nope'")
    assert line.startswith("error: --against 'nope': not a run directory"), line


# ------------------------------------------------------------------ the simulated nightly


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--profiles", ","], "--profiles ','"),
        (["--profiles", "hisparse384, hisparse384"], "hisparse384 given twice"),
        (["--reason", "why"], "--reason: only with --accept"),
        (["--summary", "{blocker}/s.md"], "{blocker}/s.md: cannot write there"),
        (["--accept", "--reason", "t", "--accepted", "{blocker}/a.jsonl"], "{blocker}/a.jsonl"),
        (["--profiles", "hisparse384", "--claims", "{blocker}.yaml"], "claims file not found"),
    ],
    ids=["empty-profiles", "arm-twice", "reason-alone", "summary", "accepted", "claims"],
)
def test_sim_nightly_refuses_before_any_arm_runs(
    extra: list[str], needle: str, blocker: Path, tmp_path: Path
) -> None:
    out = tmp_path / "night"
    args = [a.format(blocker=blocker) for a in extra]
    result = repro("nightly", "--engine", "sim", "--out", str(out), "--no-dashboard", *args)
    one_error_line(result, needle.format(blocker=blocker))
    assert not out.exists()
    assert blocker.read_text() == "not a folder"


# ------------------------------------------------------------------ files read mid-run


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"\xff\xfe", "cannot read dataset"),
        (b'[{"a":', "not valid JSON"),
        (b"[]", "a built dataset must be a mapping of keys, got list"),
    ],
    ids=["not-utf8", "truncated", "a-list"],
)
def test_simulate_dataset_json_that_is_not_a_dataset(
    content: bytes, expected: str, tmp_path: Path
) -> None:
    data = tmp_path / "d.json"
    data.write_bytes(content)
    out = tmp_path / "runs"
    result = repro(
        "simulate", "--profile", "hisparse384", "--dataset", str(data), "--out", str(out)
    )
    one_error_line(result, str(data), expected)
    assert not out.exists()


def test_recorded_replies_that_are_not_text(tmp_path: Path) -> None:
    from harness.coherence.store import read_replies

    path = tmp_path / "replies.json"
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match=r"replies\.json: cannot read recorded replies"):
        read_replies(path)


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (
            ["dataset", "build", "{recipe}", "--output-path", "{tmp}/d.json"],
            "number: 4\nnumber: 8\n",
        ),
        (
            [
                "sweep",
                "--profile",
                "hisparse384",
                "--engine",
                "sim",
                "--dataset",
                "{recipe}",
                "--dry-run",
            ],
            "number: 4\n\tnum_turns: 2\n",
        ),
    ],
    ids=["dataset-build-key-twice", "sweep-dry-run-tab"],
)
def test_dataset_recipe_yaml_errors_are_one_line(
    args: list[str], text: str, tmp_path: Path
) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(text)
    argv = [a.format(recipe=recipe, tmp=tmp_path) for a in args]
    one_error_line(repro(*argv), str(recipe), "not valid YAML (line 2, column 1")
    assert not (tmp_path / "d.json").exists()


@pytest.mark.parametrize(
    ("content", "expected"),
    [(b"\xff\xfe", "cannot read ("), (b"partition: a\npartition: b\n", "'partition' given twice")],
    ids=["not-utf8", "key-twice"],
)
def test_slurm_config_that_is_not_yaml_text(content: bytes, expected: str, tmp_path: Path) -> None:
    config = tmp_path / "slurm.yaml"
    config.write_bytes(content)
    args = ["sweep", "--profile", "cpu-tiny", "--executor", "slurm", "--slurm-config", str(config)]
    one_error_line(repro(*args, "--dry-run"), f"--slurm-config {config}", expected)


def test_sim_serve_host_that_does_not_resolve_or_busy_port_is_named() -> None:
    import socket

    bad = repro(
        "sim", "serve", "--profile", "hisparse384", "--host", "999.1.1.1", "--port", "18779"
    )
    one_error_line(bad, "--host 999.1.1.1 --port 18779: cannot serve there")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        taken = repro("sim", "serve", "--profile", "hisparse384", "--port", port, timeout=60)
    one_error_line(taken, f"--port {port}: cannot serve there", "address already in use")


# ------------------------------------------------------------------ a run's records


@pytest.mark.parametrize(
    ("args", "record"),
    [
        (["regress", "--candidate", "{run}", "--baseline", "{run}", "--markdown"], "manifest.json"),
        (["claims", "check", "{run}", "--markdown"], "summary.json"),
        (["nightly", "--engine", "sim", "--out", "{tmp}/n", "--summary"], "manifest.json"),
        (["nightly", "--engine", "sim", "--out", "{tmp}/n", "--summary"], "summary.md"),
        (
            [
                "nightly",
                "--profiles",
                "hisparse384",
                "--build",
                "cpu-0.32.0",
                "--out",
                "{tmp}/n",
                "--summary",
            ],
            "summary.md",
        ),
        (
            ["dataset", "verify", "{tmp}/d.json", "--tokenizer", "tiny:tokenizer", "--json"],
            "summary.json",
        ),
    ],
    ids=[
        "regress-markdown",
        "claims-markdown",
        "sim-summary",
        "sim-summary-json-twin",
        "vllm-summary-json-twin",
        "dataset-verify-json",
    ],
)
def test_an_output_never_replaces_a_run_record(
    args: list[str], record: str, tmp_path: Path
) -> None:
    from support.crafted_runs import published_points, write_run

    run = write_run(tmp_path / "runs", "hisparse-run", published_points(0))
    (run / "summary.json").write_text("{}\n")
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    argv = [a.format(run=run, tmp=tmp_path) for a in args] + [str(run / record)]
    line = one_error_line(repro(*argv), "a record of run", str(run))
    assert "never overwritten" in line
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    assert not (tmp_path / "n").exists()


@pytest.mark.parametrize(
    "setting", ["sim.hbm_eff=-1", "sim.miss_rate=2", "sim.acceptance_length=0", "sim.pcie_eff=nan"]
)
def test_sim_parameters_are_held_to_the_calibration_bounds(setting: str, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    result = repro("simulate", "--profile", "hisparse384", "--set", setting, "--out", str(out))
    one_error_line(result, f"{setting.split('=')[0]}=", "outside [")
    assert not out.exists()
