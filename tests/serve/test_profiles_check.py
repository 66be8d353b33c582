"""`repro profiles check`: every shipped profile against its release's table and, where a build
of that release is installed (the CPU 0.32.0 build), the real vLLM parser and config classes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.errors import ConfigError
from harness.serve.builds import get_build, load_builds
from harness.serve.profiles import load_profile
from harness.serve.validate import all_profile_names, check_profiles, run_probe

FORK_KEY = {"hisparse_config": {"host_pool_gib": 384}}  # the blog fork's surface only


def test_every_shipped_profile_passes_with_the_real_parser(cpu_build) -> None:
    reports = check_profiles(all_profile_names())
    assert {r.name for r in reports} == set(all_profile_names()) and len(reports) >= 11
    for report in reports:
        assert not report.failed, [c.line() for c in report.checks]
    by_name = {r.name: r for r in reports}
    # the upstream GLM arms and the CPU profiles are judged by vLLM 0.32.0 itself
    for name in ("upstream-hisparse384", "upstream-offload512-nomtp", "cpu-tiny-mtp"):
        parser = [c for c in by_name[name].checks if c.name == "vllm-parser"]
        assert parser and parser[0].status == "ok" and "0.32.0" in parser[0].detail
    hisparse = next(c for c in by_name["upstream-hisparse384"].checks if c.name == "vllm-parser")
    assert "MultiConnector.connectors[0] KVTransferConfig" in hisparse.detail
    # fork arms: upstream options by the real parser, the fork-only option by the recorded surface
    fork = {c.name: c for c in by_name["hisparse384-nomtp"].checks}
    assert fork["fork-surface"].status == "ok"
    assert "fork-only attention-config left out" in fork["vllm-parser"].detail


def _planted(tmp_path: Path, attention: dict) -> Path:
    path = tmp_path / "planted.yaml"
    path.write_text(
        yaml.safe_dump(
            {"extends": "upstream-hisparse384", "serve": {"attention-config": attention}}
        )
    )
    return path


def test_a_wrong_key_inside_attention_config_fails_the_check(tmp_path: Path) -> None:
    bad = {"hisparse_config": {"eager_host_mirror": True, "device_bufer_size": 4096}}
    (report,) = check_profiles([str(_planted(tmp_path, bad))], real=False)
    assert report.failed
    (load,) = report.checks
    assert "hisparse_config.device_bufer_size" in load.detail and "planted.yaml" in load.detail
    assert "device_buffer_size, eager_host_mirror" in load.detail
    # the fork's host_pool_gib on an upstream build: the defect of the old nomtp pair
    with pytest.raises(ConfigError, match=r"hisparse_config\.host_pool_gib: unknown key"):
        load_profile(str(_planted(tmp_path, FORK_KEY)))


def test_the_real_vllm_rejects_a_wrong_key_inside_json_options(cpu_build) -> None:
    base = ["tiny", "--max-model-len", "4096"]
    good, wrong_attention, wrong_connector, wrong_spec = run_probe(
        cpu_build,
        [
            base + ["--attention-config", '{"hisparse_config":{"eager_host_mirror":true}}'],
            base + ["--attention-config", '{"hisparse_config":{"host_pool_gib":384}}'],
            base
            + [
                "--kv-transfer-config",
                (
                    '{"kv_connector":"HiSparseConnector",'
                    '"kv_role":"kv_both","kv_connector_extra_config":{"host_pool":1}}'
                ),
            ],
            base + ["--speculative-config", '{"method":"mtp","num_speculative_tokenz":3}'],
        ],
    )
    assert good["ok"] and good["vllm_version"] == "0.32.0"
    assert not wrong_attention["ok"] and "host_pool_gib" in wrong_attention["errors"][0]
    assert not wrong_connector["ok"] and "requires host_pool_gib" in wrong_connector["errors"][0]
    assert not wrong_spec["ok"] and "num_speculative_tokenz" in wrong_spec["errors"][0]


def test_upstream_builds_cannot_carry_a_fork_surface(tmp_path: Path) -> None:
    builds = yaml.safe_load(Path("launch/builds.yaml").read_text())
    for name, body in builds["builds"].items():
        if body["kind"] != "source":
            assert not body.get("extra_serve_options"), name
    nomtp = get_build(load_profile("hisparse384-nomtp").build)
    assert nomtp.kind == "source" and "attention-config" in nomtp.extra_serve_options
    bad = {
        "builds": {
            "x": {
                **builds["builds"]["blog-offload-80cb71c9ff"],
                "extra_serve_options": {"attention-config": "json"},
            }
        }
    }
    path = tmp_path / "builds.yaml"
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigError, match="key 'builds.x': .*fork build"):
        load_builds(path)


def test_cli_profiles_check_exit_status_and_lines(tmp_path: Path) -> None:
    import subprocess
    import sys

    planted = _planted(tmp_path, {"hisparse_config": {"host_pool_gib": 384}})
    argv = [sys.executable, "-c", "from harness.cli import main; main()", "profiles", "check"]
    env = {"PYTHONPATH": str(Path.cwd()), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    bad = subprocess.run(
        [*argv, "--no-real", "cpu-tiny", str(planted)],
        capture_output=True, text=True, env=env, check=False, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 1, bad.stdout + bad.stderr
    lines = bad.stdout.splitlines()
    assert lines[0].startswith("ok   cpu-tiny")
    assert any(line.startswith(f"FAIL {planted}") for line in lines)
    assert any("hisparse_config.host_pool_gib: unknown key" in line for line in lines)
    usage = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    assert usage.returncode != 0 and "--all" in usage.stderr
