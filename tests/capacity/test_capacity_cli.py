"""`repro capacity` through click: text, --json schema, --plot, errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from harness.cli import cli
from harness.errors import ReproError


def _invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, ["capacity", *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_done_means_command() -> None:
    out = _invoke("--gpu", "h200", "--tp", "8", "--seq-len", "142000", "--spec-tokens", "3")
    assert "weights 87.97 GiB/GPU; available KV 17.8 GiB/GPU" in out
    row = next(line for line in out.splitlines() if line.strip().startswith("142,000"))
    # baseline 2, HiSparse 29 (14.50x, 173 GiB), MTP3 18 (9.00x, 107 GiB = ceil(18 x 2219 x
    # 2,875,392 / 2^30) = ceil(106.96))
    assert row.split()[:11] == [
        "142,000",
        "2",
        "29",
        "14.50x",
        "173",
        "GiB",
        "|",
        "18",
        "9.00x",
        "107",
        "GiB",
    ]
    assert "MTP3 figure: (3 + 2) x 2,048 = 10,240 rows" in out
    assert "GPU HBM per DP group at 29 requests" in out


def test_json_schema() -> None:
    rows = json.loads(
        _invoke("--json", "--seq-len", "74160", "--seq-len", "1048576", "--spec-tokens", "3")
    )
    assert [r["seq_len"] for r in rows] == [74160, 1048576]
    required = {
        "seq_len",
        "baseline_requests",
        "hisparse_requests",
        "multiplier",
        "min_host_pool_gib",
        "kv_gib_per_gpu",
    }
    for row in rows:
        assert required <= set(row)
        assert row["kv_gib_per_gpu"] == 17.8
    first, last = rows
    assert (first["baseline_requests"], first["hisparse_requests"]) == (5, 41)
    assert first["multiplier"] == 41 / 5 and first["mtp"]["hisparse_requests"] == 23
    assert last["baseline_requests"] == 0 and last["multiplier"] == "inf"
    assert last["mtp"]["multiplier"] == "inf"
    assert json.loads(_invoke("--json", "--seq-len", "8192"))[0]["mtp"] is None


def test_seq_range_many_lengths_and_advanced_constants() -> None:
    rows = json.loads(_invoke("--json", "--seq-range", "8192:73728:8192"))
    assert [r["seq_len"] for r in rows] == list(range(8192, 73729, 8192))
    out = _invoke("--seq-range", "8192:81920:8192")
    assert "memory composition omitted for 10 lengths" in out
    # --groups 10 halves hot and retained pages: 2219 + 640 + 20 = 2879; 103692 // 2879 = 36
    row = json.loads(_invoke("--json", "--seq-len", "142000", "--groups", "10"))[0]
    assert row["hisparse_requests"] == 36
    # --kv-gib-per-gpu 20: floor(20 x 2^30 / 184,320) = 116508 pages // 3539 = 32
    row = json.loads(_invoke("--json", "--seq-len", "142000", "--kv-gib-per-gpu", "20"))[0]
    assert row["hisparse_requests"] == 32 and row["kv_gib_per_gpu"] == 20.0


def test_dp_totals_and_no_share_host() -> None:
    row = json.loads(_invoke("--json", "--tp", "4", "--dp", "2", "--seq-len", "142000"))[0]
    # per DP 2 and 25 (see test_capacity_formulas); totals x 2
    assert (row["baseline_requests"], row["hisparse_requests"]) == (4, 50)
    shared = json.loads(_invoke("--json", "--seq-len", "142000"))[0]
    private = json.loads(_invoke("--json", "--seq-len", "142000", "--no-share-host"))[0]
    # 8 copies of the 173 GiB pool + 128 GiB indexer offload = 1,512 GiB physical
    assert shared["physical_host_gib"] == 301 and private["physical_host_gib"] == 1512


def test_plot_is_offline_html(tmp_path: Path) -> None:
    path = tmp_path / "capacity.html"
    out = _invoke("--plot", str(path), "--seq-len", "142000", "--spec-tokens", "3")
    assert f"wrote {path}" in out
    html = path.read_text(encoding="utf-8")
    assert "HiSparse only" in html and "Concurrency vs. sequence length" in html
    assert "GPU HBM" in html and "CPU host pools" in html
    assert '<script src="https://cdn.plot.ly' not in html  # plotly.js is inline
    assert len(html) > 1_000_000
    # with --json, stdout stays parseable: the "wrote" message goes to stderr
    result = CliRunner().invoke(cli, ["capacity", "--json", "--plot", str(path)])
    assert json.loads(result.stdout)[0]["seq_len"] == 81920  # the calculator's default length
    assert f"wrote {path}" in result.stderr


def test_errors_exit_2_with_message() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "from harness.cli import main; main()", "capacity", "--tp", "1"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: GLM-5.3 does not fit"), proc.stderr
    cases = [
        (["--host-pool-gib", "0"], "--host-pool-gib 0"),
        (["--tp", "3"], "allows tensor parallel sizes [1, 2, 4, 8]"),
        (["--hbm-gib", "100", "--gpu", "b200"], "either --gpu or --hbm-gib"),
        (["--model", "nope"], "unknown capacity model 'nope'"),
        (["--seq-len", "0"], "--seq-len 0"),
    ]
    for args, message in cases:
        result = CliRunner().invoke(cli, ["capacity", *args], standalone_mode=False)
        assert isinstance(result.exception, ReproError), (args, result.exception)
        assert message in str(result.exception)
    bad_gpu = CliRunner().invoke(cli, ["capacity", "--gpu", "a100"])
    assert bad_gpu.exit_code == 2 and "a100" in bad_gpu.output


def test_help_lists_options() -> None:
    out = _invoke("--help")
    for option in (
        "--spec-tokens",
        "--seq-range",
        "--host-pool-gib",
        "--run",
        "--plot",
        "--indexer-offload-gib",
        "--share-host / --no-share-host",
        '"inf"',
    ):
        assert option in out


def test_text_shows_infinity_when_only_hisparse_serves() -> None:
    out = _invoke("--seq-len", "1048576")
    row = next(line for line in out.splitlines() if line.strip().startswith("1,048,576"))
    # baseline 6260 // 16384 = 0; HiSparse 103692 // (16384 + 1320) = 5
    assert row.split()[:4] == ["1,048,576", "0", "5", "∞"]
    assert "HiSparse enables these sequence lengths" in out
