"""`repro plan` on the command line: strict refusals (exit 2, the option named), the JSON
record, the text table and the serve command of a configuration."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import cli
from harness.paths import REPO_ROOT
from harness.plan.arms import Config, serve_command
from harness.plan.render import SCHEMA, PlanRecord
from harness.serve.profiles import load_profile, render_serve_command

TINY = ["--turns", "2", "--context", "2000", "--arms", "hisparse", "--host-pool-gib", "128",
        "--max-num-seqs", "2,256", "--concurrency", "1,2,4", "--jobs", "1"]  # fmt: skip


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPRO_CACHE", str(tmp_path / "cache"))


@pytest.mark.parametrize(
    ("args", "option", "reason"),
    [
        (["--model", "nope"], "--model", "no model file"),
        (["--gpu", "a100"], "--gpu", "unknown GPU"),
        (["--tp", "3"], "--tp", "modelled at TP"),
        (["--tp", "2"], "--tp", "does not fit"),
        (["--context", "140000"], "--context", "beyond the served max-model-len"),
        (["--turns", "0"], "--turns", "0"),
        (["--slo", "tpot=70"], "--slo", "unit s or ms"),
        ([], "--slo", "required"),
        (["--think-time", "{kind: exponential}"], "--think-time", "needs mean_s"),
        (["--think-time", "{kind: file, path: missing.json}"], "--think-time", "missing.json"),
        (["--think-time", "[1, 2"], "--think-time", "not a YAML mapping"),
        (["--min-attainment", "1.5"], "--min-attainment", "1.5"),
        (["--arms", "hisparse,bogus"], "--arms", "unknown arm"),
        (["--concurrency", "8,8"], "--concurrency", "given twice"),
        (["--max-num-seqs", "0"], "--max-num-seqs", "> 0"),
        (["--host-pool-gib", "inf"], "--host-pool-gib", "finite"),
        (["--gpu", "b200"], "--calibration", "no calibration fitted for glm-5.3 on b200"),
        (["--model", "deepseek-v3.2"], "--calibration", "no calibration fitted"),
        (["--model", "deepseek-v3.2", "--calibration", "none"], "--model", "cannot model"),
    ],
)
def test_bad_input_is_one_usage_error_naming_the_option(
    args: list[str], option: str, reason: str
) -> None:
    slo = [] if "--slo" in args or option == "--slo" else ["--slo", "tpot=70ms"]
    result = CliRunner().invoke(cli, ["plan", *slo, *args])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    assert option in errors[0] and reason in errors[0], errors[0]
    assert "Traceback" not in result.output


def test_a_calibration_is_used_only_at_the_tp_it_was_fitted_on(tmp_path: Path) -> None:
    fitted = (REPO_ROOT / "launch/calibrations/glm53-h200.yaml").read_text(encoding="utf-8")
    b300 = tmp_path / "glm53-b300.yaml"
    b300.write_text(fitted.replace("gpu: h200", "gpu: b300"), encoding="utf-8")
    args = ["plan", "--slo", "tpot=70ms", "--gpu", "b300", "--calibration", str(b300)]
    result = CliRunner().invoke(cli, [*args, "--tp", "4"])
    assert result.exit_code == 2 and "--tp 4: glm53-b300.yaml was fitted on" in result.output
    wrong_gpu = CliRunner().invoke(cli, [*args[:-4], "--calibration", str(b300)])
    assert wrong_gpu.exit_code == 2
    assert "--calibration" in wrong_gpu.output and "fitted for GPU 'b300', not 'h200'" in (
        wrong_gpu.output
    )


def test_json_output_is_a_versioned_record_of_the_whole_grid() -> None:
    result = CliRunner().invoke(cli, ["plan", "--slo", "tpot=6ms", "--format", "json", *TINY])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    record = PlanRecord.model_validate(data)  # unknown keys would be refused
    assert data["schema_version"] == SCHEMA == "repro.plan/1"
    assert len(record.configurations) == 6 and record.counts["configurations"] == 6
    assert record.request["objectives"] == "tpot=6ms" and record.request["gpus"] == 8
    best = record.ranked[0]
    assert best.rank == 1 and best.slo_attainment >= 0.9
    assert [r.goodput_rps_per_gpu for r in record.ranked] == sorted(
        (r.goodput_rps_per_gpu for r in record.ranked), reverse=True
    )
    low, high = best.goodput_rps_per_gpu_interval80 or [0.0, 0.0]
    assert low < best.goodput_rps_per_gpu < high  # from the calibration's intervals
    assert set(best.percentiles) >= {"p50_ttft_ms", "p90_tpot_ms", "p99_e2e_s"}
    assert best.capacity["requests"] >= 1 and best.capacity["seq_len"] == 2000 + 973 + 220
    assert record.best_serve_command is not None
    argv = shlex.split(record.best_serve_command)
    assert argv[:2] == ["vllm", "serve"]
    assert argv[argv.index("--max-num-seqs") + 1] == str(best.config["max_num_seqs"])
    assert "progress" not in result.stdout  # the progress bar is on stderr only


def test_text_output_has_the_table_the_serve_command_and_the_counts() -> None:
    result = CliRunner().invoke(cli, ["plan", "--slo", "tpot=6ms", *TINY])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "6 configurations on 2 simulated servers" in out
    assert "serve command of the best:\n  vllm serve zai-org/GLM-5.3" in out
    assert " 1 hisparse" in out


def test_serve_command_is_the_profile_systems_for_the_configuration() -> None:
    config = Config("offload", 256, 16, 8)
    line = serve_command(config, model_id="zai-org/GLM-5.3", tp=8)
    expected = load_profile(
        "offload512",
        [
            "serve.max-num-seqs=16",
            (
                "serve.kv-transfer-config={kv_connector: OffloadingConnector, kv_role: kv_both, "
                "kv_connector_extra_config: {spec_name: TieringOffloadingSpec, "
                "cpu_bytes_to_use: 274877906944}}"
            ),
        ],
    )
    assert shlex.split(line) == render_serve_command(expected)
    assert "--attention-config" not in line
    hisparse = serve_command(Config("hisparse", 384, 24, 8), model_id="zai-org/GLM-5.3", tp=8)
    assert '{"hisparse_config":{"host_pool_gib":384}}' in hisparse
