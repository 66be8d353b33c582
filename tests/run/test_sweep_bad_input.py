"""Bad input to `repro sweep`: every mistake is one clear error, found before anything is written,
and nothing a user already has is lost (issue 17).

The sweeps that do run target a loopback fake OpenAI server (tests/support/fake_openai.py) and the
real pinned EvalScope client; no model hub, no GPU.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.fake_openai import SETS

from harness.cli import cli
from harness.client.evalscope import parse_summary
from harness.cluster.listing import list_runs
from harness.errors import ConfigError, DatasetError, RunError, ServerError
from harness.results import atomic_write_json, read_manifest
from harness.run.sweep import SweepRequest, run_sweep
from harness.serve.server import free_port

QUIET = {"echo": lambda _msg: None}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- run ids


@pytest.mark.parametrize(
    "run_id", ["../../evil", "/abs/evil", "a/b", "<script>alert(1)</script>", ".hidden", "-x", ""]
)
def test_unsafe_run_ids_are_refused(run_id: str) -> None:
    with pytest.raises(ConfigError, match="--run-id"):
        SweepRequest(profile="cpu-tiny", run_id=run_id)


def test_run_id_cannot_escape_out_through_the_cli(tmp_path: Path) -> None:
    out = tmp_path / "R" / "sub"
    result = CliRunner().invoke(
        cli,
        ["sweep", "--profile", "cpu-tiny", "--url", "http://127.0.0.1:1", "--out", str(out)]
        + ["--run-id", "../../evil"],
    )
    assert result.exit_code == 2  # refused while the options are parsed (harness/names.py)
    assert "'--run-id': '../../evil'" in result.output
    assert not (tmp_path / "evil").exists() and not (tmp_path / "R").exists()


# --------------------------------------------------------------------------- sweep settings


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("sweep.points=[]", "sweep.points"),
        ("sweep.points=[[0,0]]", "sweep.points.0.0"),
        ("sweep.points=[[1,-4]]", "sweep.points.0.1"),
        ("sweep.max_tokens=-5", "sweep.max_tokens"),
        ("sweep.max_turns=0", "sweep.max_turns"),
        ("sweep.dataset_offset=-1", "sweep.dataset_offset"),
        ("sweep.scrape_interval_s=0", "sweep.scrape_interval_s"),
        ("sweep.point_timeout_s=-1", "sweep.point_timeout_s"),
        ("sweep.sleep_between_points_s=-1", "sweep.sleep_between_points_s"),
        ("sweep.warmup_requests=-1", "sweep.warmup_requests"),
    ],
)
def test_sweep_settings_are_range_checked_before_anything_runs(
    tmp_path: Path, override: str, key: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        run_sweep(
            SweepRequest("cpu-tiny", overrides=[override], out=tmp_path, dry_run=True), **QUIET
        )
    assert key in str(caught.value) and "cpu-tiny.yaml" in str(caught.value)


# --------------------------------------------------------------------------- EvalScope sentinels


def test_evalscope_sentinels_are_null_and_named() -> None:
    summary = parse_summary(
        {
            "Total Requests": 0,
            "Succeed Requests": 0,
            "Failed Requests": 0,
            "Time taken for tests (s)": 0.5,
            "Number of concurrency": 1,
            "Average time per output token (ms)": -1000.0,
            "TPOT (ms)": -1000.0,
            "Output token throughput (tok/s)": -1,
            "Total token throughput (tok/s)": float("nan"),
        }
    )
    assert summary.mean_tpot_ms is None and summary.output_throughput is None
    assert summary.total_throughput is None
    assert sorted(s.split("=")[0] for s in summary.sentinels) == [
        "mean_tpot_ms",
        "output_throughput",
        "total_throughput",
    ]


def test_records_are_strict_json_with_nan_as_null(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    atomic_write_json(path, {"p99": float("nan"), "nested": [1.0, float("inf")], "ok": 2.5})
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"p99": None, "nested": [1.0, None], "ok": 2.5}
    assert not math.isnan(2.5)


# --------------------------------------------------------------------------- checks come first


def test_dead_or_malformed_url_leaves_no_run_directory(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{_closed_port()}"
    for url, error in ((dead, "/health did not answer"), ("http://127.0.0.1:abc", "--url")):
        with pytest.raises(ServerError, match=error):
            run_sweep(SweepRequest("cpu-tiny", url=url, out=tmp_path, run_id="x"), **QUIET)
    assert list(tmp_path.iterdir()) == []


def test_busy_port_leaves_no_run_directory(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ServerError, match=f"port {port} on 127.0.0.1 is busy"):
            run_sweep(SweepRequest("cpu-tiny", out=tmp_path, run_id="x", port=port), **QUIET)
    assert list(tmp_path.iterdir()) == []


def test_unwritable_out_is_one_error_naming_the_path(
    fake_server, small_dataset: Path, tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(RunError, match=f"cannot create run directory {blocker}/"):
        run_sweep(
            SweepRequest(
                "cpu-tiny",
                overrides=SETS,
                dataset=str(small_dataset),
                url=fake_server(),
                out=blocker,
            ),
            **QUIET,
        )


def test_dry_run_on_a_truncated_dataset_names_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "truncated.json"
    broken.write_text('{"conversations": [[{"messages": [')
    with pytest.raises(DatasetError, match=f"dataset {broken}: not a readable swe_smith JSON"):
        run_sweep(SweepRequest("cpu-tiny", dataset=str(broken), dry_run=True), **QUIET)


def test_two_sweeps_in_the_same_second_get_distinct_run_ids(
    fake_server, small_dataset: Path, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(time, "strftime", lambda *_a: "20260101-000000")
    url = fake_server()
    one = [*SETS, "sweep.points=[[1,1]]"]  # the last setting of a key wins
    first = run_sweep(
        SweepRequest("cpu-tiny", overrides=one, dataset=str(small_dataset), url=url, out=tmp_path),
        **QUIET,
    )
    second = run_sweep(
        SweepRequest("cpu-tiny", overrides=one, dataset=str(small_dataset), url=url, out=tmp_path),
        **QUIET,
    )
    assert first.name == "cpu-tiny-20260101-000000"
    assert second.name == "cpu-tiny-20260101-000000-2"
    assert read_manifest(first).status == read_manifest(second).status == "complete"


# --------------------------------------------------------------------------- resume


def test_resume_with_a_corrupt_point_changes_nothing(partial_run: Path) -> None:
    point = next(partial_run.glob("points/*/point.json"))
    point.write_text('{"schema_version": "repro.point/1", "point_id":')
    before = (partial_run / "manifest.json").read_bytes()
    with pytest.raises(RunError, match=str(point)):
        run_sweep(SweepRequest(resume=partial_run), **QUIET)
    assert (partial_run / "manifest.json").read_bytes() == before


def test_resume_refuses_a_run_whose_owner_is_alive(partial_run: Path) -> None:
    manifest = read_manifest(partial_run)
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with open(f"/proc/{owner.pid}/stat", encoding="ascii") as handle:
            ticks = int(handle.read().rsplit(")", 1)[1].split()[19])
        manifest.status = "running"
        manifest.owner = {"host": socket.gethostname(), "pid": owner.pid, "start_ticks": ticks}
        atomic_write_json(partial_run / "manifest.json", manifest)
        before = (partial_run / "manifest.json").read_bytes()
        with pytest.raises(RunError, match=f"still being run by pid {owner.pid}"):
            run_sweep(SweepRequest(resume=partial_run), **QUIET)
        assert (partial_run / "manifest.json").read_bytes() == before
        assert " running " in "\n".join(list_runs(partial_run.parent))
    finally:
        owner.kill()
        owner.wait()
    # the owner is gone: the run is stale, listed so, and resumable
    assert " stale " in "\n".join(list_runs(partial_run.parent))
    run_sweep(SweepRequest(resume=partial_run), **QUIET)
    assert read_manifest(partial_run).status == "complete"
    assert read_manifest(partial_run).owner["pid"] == os.getpid()


def test_a_gpu_profile_on_a_gpu_less_machine_says_so_before_the_dataset(tmp_path: Path) -> None:
    # the blog's dataset needs the GLM-5.3 tokenizer from the hub: the GPU check must come first
    # (after the coherence preflight: offload512's replies are not recorded yet, see
    # tests/coherence/test_coherence_references.py)
    with pytest.raises(ServerError, match="needs 8 NVIDIA GPU"):
        run_sweep(
            SweepRequest("hisparse384", out=tmp_path, allow_incoherent=True, port=free_port()),
            **QUIET,
        )
    assert list(tmp_path.iterdir()) == []


def test_preflight_failures_come_before_the_build_the_dataset_and_the_run_dir(
    tmp_path: Path,
) -> None:
    ten_tib = 10 * 2**40
    pool = (
        'serve.kv-transfer-config={"kv_connector":"OffloadingConnector","kv_role":"kv_both",'
        f'"kv_connector_extra_config":{{"cpu_bytes_to_use":{ten_tib}}}}}'
    )
    with pytest.raises(ConfigError) as caught:
        run_sweep(
            SweepRequest("cpu-tiny", overrides=[pool], out=tmp_path, port=free_port()), **QUIET
        )
    assert "preflight for profile cpu-tiny" in str(caught.value)
    assert "FAIL host-ram: pinned pools 10240 GiB" in str(caught.value)
    assert list(tmp_path.iterdir()) == []
