"""`repro export RUN --format vllm-bench|guidellm|csv` on a small simulated run."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from harness.analysis.request_table import read_table
from harness.cli import cli
from harness.sim.run import run_simulation

SETS = [
    "sweep.points=[[1,2],[4,8]]",
    "sweep.dataset_offset=3",
    "sweep.scrape_interval_s=2",
    "sweep.slo=ttft=2s,tpot=50ms",
    "sweep.think_time={kind: fixed, seconds: 1.5}",
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("export")
    recipe = root / "small.yaml"
    recipe.write_text(
        "number: 10\nnum_turns: 3\nfirst_turn_length: 30000\nsubsequent_turn_length: 500\n"
    )
    return run_simulation(
        "hisparse384", dataset=str(recipe), overrides=SETS, out=root, run_id="exp"
    )


def export(*args: str) -> str:
    result = CliRunner().invoke(cli, ["export", *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_csv_has_every_request_of_every_point(run_dir):
    frame = pd.read_csv(io.StringIO(export(str(run_dir), "--format", "csv")))
    assert len(frame) == 2 * 3 + 8 * 3
    assert list(frame.columns[:7]) == [
        "run_id", "point_id", "label", "parallel", "number", "repeat", "valid",
    ]  # fmt: skip
    c4 = frame[frame["point_id"] == "p004-n0008-r0"]
    table = read_table(run_dir / "points" / "p004-n0008-r0" / "requests.parquet")
    assert c4["ttft_s"].to_numpy() == pytest.approx(table["ttft_s"].to_numpy())
    assert json.loads(c4["itl_s"].iloc[0]) == pytest.approx(list(table["itl_s"].iloc[0]))


def test_vllm_bench_lines_match_the_tables(run_dir, tmp_path):
    out = tmp_path / "bench.jsonl"
    export(str(run_dir), "--format", "vllm-bench", "--out", str(out))
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["max_concurrency"] for r in lines] == [1, 4]
    c4 = lines[1]
    table = read_table(run_dir / "points" / "p004-n0008-r0" / "requests.parquet")
    ok = table[table["success"]]
    assert c4["completed"] == len(ok) == c4["num_prompts"] == 24
    assert c4["label"] == "exp/c4" and c4["backend"] == "openai-chat"
    assert c4["total_output_tokens"] == int(ok["output_tokens"].sum())
    assert c4["median_ttft_ms"] == pytest.approx(ok["ttft_s"].median() * 1000)
    assert c4["mean_e2el_ms"] == pytest.approx(ok["latency_s"].mean() * 1000)
    assert c4["ttfts"] == pytest.approx(ok["ttft_s"].tolist())
    duration = table["end_s"].max() - table["start_s"].min()
    assert c4["duration"] == pytest.approx(duration)
    meeting = ((ok["ttft_s"] <= 2.0) & (ok["tpot_s"] <= 0.05)).sum()
    assert c4["request_goodput"] == pytest.approx(meeting / duration)
    assert c4["repro"]["slo"] == "ttft=2s,tpot=50ms"
    assert set(c4["repro"]["think_s"]) == {0.0, 1.5}
    # --slo overrides the run's objectives
    loose = json.loads(export(str(run_dir), "--format", "vllm-bench", "--slo", "e2e=3600s")
                       .splitlines()[1])  # fmt: skip
    assert loose["request_goodput"] == pytest.approx(24 / duration)


def test_guidellm_report_shape(run_dir):
    report = json.loads(export(str(run_dir), "--format", "guidellm"))
    bench = report["benchmarks"][1]
    assert bench["type_"] == "generative_benchmark"
    assert bench["args"]["profile"] == {"type_": "concurrent", "streams": [4]}
    ttft = bench["metrics"]["time_to_first_token_ms"]["successful"]
    table = read_table(run_dir / "points" / "p004-n0008-r0" / "requests.parquet")
    assert ttft["count"] == 24
    assert ttft["median"] == pytest.approx(table["ttft_s"].median() * 1000)
    assert ttft["max"] == pytest.approx(table["ttft_s"].max() * 1000)
    assert set(ttft["percentiles"]) == {
        "p001", "p01", "p05", "p10", "p25", "p50", "p75", "p90", "p95", "p99", "p999",
    }  # fmt: skip
    assert len(bench["requests"]["successful"]) == 24 and bench["requests"]["errored"] == []
    first = bench["requests"]["successful"][0]
    assert first["first_token_time"] - first["start_time"] == pytest.approx(
        first["time_to_first_token_ms"] / 1000
    )
    conc = bench["metrics"]["request_concurrency"]["successful"]["mean"]
    assert 1.0 <= conc <= 4.0


def test_export_errors_are_one_line(run_dir, tmp_path):
    runner = CliRunner()
    result = runner.invoke(cli, ["export", str(run_dir), "--format", "parquet"])
    assert result.exit_code == 2 and "parquet" in result.output
    record = run_dir / "manifest.json"
    result = runner.invoke(cli, ["export", str(run_dir), "--format", "csv", "--out", str(record)])
    assert result.exit_code != 0 and "never overwritten" in str(result.exception or result.output)
    result = runner.invoke(cli, ["export", str(run_dir), "--format", "csv", "--slo", "ttft=2"])
    assert result.exit_code != 0 and "ttft='2'" in str(result.exception or result.output)
