"""Profiles: strict validation (file + key in every message), extends/null, overrides, rendering,
and equivalence of the two blog arms with the blog appendix commands."""

from __future__ import annotations

import json
import shlex
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import cli
from harness.errors import ConfigError
from harness.serve.profiles import list_profiles, load_profile, render_serve_command

# The blog appendix's server commands (docs/recipe.md §2: shared flags + per-arm flags).
BLOG_SHARED = (
    "vllm serve zai-org/GLM-5.3 --served-model-name glm-agentx --port 8000 "
    "--tensor-parallel-size 8 --kv-cache-dtype fp8 --max-model-len 142000 "
    "--max-num-batched-tokens 32768 --max-num-seqs 256 --gpu-memory-utilization 0.92 "
    "--enable-prefix-caching --tool-call-parser glm47 --reasoning-parser glm45 "
    "--enable-auto-tool-choice --trust-remote-code "
)
BLOG_HISPARSE384 = BLOG_SHARED + (
    """--attention-config '{"hisparse_config": {"host_pool_gib": 384}}' """
    """--kv-transfer-config '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both", """
    """"kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec", """
    """"cpu_bytes_to_use": 137438953472}}' """
    """--speculative-config '{"method": "mtp", "num_speculative_tokens": 3}'"""
)
BLOG_OFFLOAD512 = BLOG_SHARED + (
    """--kv-transfer-config '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both", """
    """"kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec", """
    """"cpu_bytes_to_use": 549755813888}}' """
    """--speculative-config '{"method": "mtp", "num_speculative_tokens": 3}'"""
)


def parse_command(argv: list[str]) -> tuple[str, dict[str, object]]:
    """(model, {flag: value}) with JSON values decoded and bare flags as True; host dropped."""
    assert argv[:2] == ["vllm", "serve"]
    model, rest = argv[2], argv[3:]
    flags: dict[str, object] = {}
    i = 0
    while i < len(rest):
        flag = rest[i]
        assert flag.startswith("--"), flag
        if i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            value: object = rest[i + 1]
            if isinstance(value, str) and value.startswith("{"):
                value = json.loads(value)
            flags[flag] = value
            i += 2
        else:
            flags[flag] = True
            i += 1
    flags.pop("--host", None)  # the blog relied on the default; repro binds 127.0.0.1
    return model, flags


@pytest.mark.parametrize(
    ("profile", "blog"), [("hisparse384", BLOG_HISPARSE384), ("offload512", BLOG_OFFLOAD512)]
)
def test_blog_arm_command_equals_blog_appendix(profile: str, blog: str) -> None:
    result = CliRunner().invoke(cli, ["profiles", "show", profile, "--command"])
    assert result.exit_code == 0, result.output
    ours = parse_command(shlex.split(result.output.strip()))
    theirs = parse_command(shlex.split(blog))
    assert ours == theirs


def test_all_shipped_profiles_load_and_render() -> None:
    names = {p.name for p in list_profiles()}
    assert {
        "hisparse384",
        "hisparse384-nomtp",
        "offload512",
        "offload512-nomtp",
        "upstream-hisparse384",
        "upstream-offload512",
        "cpu-tiny",
        "cpu-tiny-mtp",
        "cpu-tiny-pressure",
    } <= names
    for profile in list_profiles():
        argv = render_serve_command(profile)
        assert argv[:3] == ["vllm", "serve", profile.model]
        assert profile.gpus == (0 if profile.build == "cpu-0.32.0" else 8)


def test_cpu_profiles_match_interface() -> None:
    tiny = load_profile("cpu-tiny")
    assert (tiny.build, tiny.model, tiny.gpus) == ("cpu-0.32.0", "tiny:tiny-llama", 0)
    assert tiny.serve == {
        "served-model-name": "tiny",
        "max-model-len": 4096,
        "dtype": "bfloat16",
        "enable-prompt-tokens-details": True,  # the server's cached tokens per request
    }
    assert tiny.sweep.points == [(1, 2), (4, 8), (8, 16)]
    assert (tiny.sweep.dataset, tiny.sweep.dataset_offset, tiny.sweep.max_tokens) == (
        "cpu-tiny",
        2,
        64,
    )
    mtp = load_profile("cpu-tiny-mtp")
    assert mtp.model == "tiny:tiny-dsv3-mtp"
    assert mtp.serve["speculative-config"] == {"method": "mtp", "num_speculative_tokens": 1}
    assert mtp.served_model_name == "tiny"
    pressure = load_profile("cpu-tiny-pressure")
    assert pressure.serve["num-gpu-blocks-override"] == 16
    assert pressure.serve["max-model-len"] == 1920
    # the pool must at least hold one max-length request (CPU blocks are 128 tokens)
    assert 16 * 128 >= pressure.serve["max-model-len"]


def test_nomtp_and_upstream_variants_via_extends() -> None:
    nomtp = load_profile("hisparse384-nomtp")
    assert "speculative-config" not in nomtp.serve
    assert nomtp.serve["attention-config"] == {"hisparse_config": {"host_pool_gib": 384}}
    off = load_profile("offload512")
    assert "attention-config" not in off.serve
    assert off.serve["kv-transfer-config"]["kv_connector_extra_config"] == {
        "spec_name": "TieringOffloadingSpec",
        "cpu_bytes_to_use": 512 * 2**30,
    }
    up = load_profile("upstream-hisparse384")
    assert up.serve["attention-config"] == {"hisparse_config": {"eager_host_mirror": True}}
    kv = up.serve["kv-transfer-config"]
    assert kv["kv_connector"] == "MultiConnector"
    assert kv["kv_connector_extra_config"].keys() == {"connectors"}
    hisparse, offload = kv["kv_connector_extra_config"]["connectors"]
    assert hisparse["kv_connector"] == "HiSparseConnector"
    assert hisparse["kv_connector_extra_config"] == {"host_pool_gib": 384}
    assert offload["kv_connector_extra_config"]["cpu_bytes_to_use"] == 128 * 2**30
    assert up.ready_timeout_s >= 1800


def test_rendering_booleans_and_json(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "p",
        """
        extends: cpu-tiny
        serve:
          enforce-eager: true
          enable-prefix-caching: false
          trust-remote-code: false
          speculative-config: {method: ngram, num_speculative_tokens: 3}
    """,
    )
    argv = render_serve_command(
        load_profile(str(path)), model_path="/m", port=18123, executable="/venv/bin/vllm"
    )
    assert argv[:7] == ["/venv/bin/vllm", "serve", "/m", "--host", "127.0.0.1", "--port", "18123"]
    assert "--enforce-eager" in argv and "--no-enable-prefix-caching" in argv
    assert "--no-trust-remote-code" in argv  # BooleanOptionalAction in 0.32
    i = argv.index("--speculative-config")
    assert argv[i + 1] == '{"method":"ngram","num_speculative_tokens":3}'


def test_overrides_set_and_remove() -> None:
    profile = load_profile(
        "cpu-tiny-mtp",
        [
            "serve.max-num-seqs=4",
            "serve.speculative-config=null",
            "sweep.max_tokens=16",
            "port=18150",
        ],
    )
    assert profile.serve["max-num-seqs"] == 4
    assert "speculative-config" not in profile.serve
    assert profile.sweep.max_tokens == 16 and profile.port == 18150
    json_override = load_profile(
        "cpu-tiny", ['serve.speculative-config={"method": "ngram", "num_speculative_tokens": 2}']
    )
    assert json_override.serve["speculative-config"]["num_speculative_tokens"] == 2


# ------------------------------------------------------------------------------- validation


def write(folder: Path, name: str, body: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(textwrap.dedent(body))
    return path


def expect_error(path_or_name: str, *fragments: str, overrides: tuple[str, ...] = ()) -> str:
    with pytest.raises(ConfigError) as info:
        load_profile(path_or_name, overrides)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_unknown_top_level_key(tmp_path: Path) -> None:
    path = write(tmp_path, "bad", "extends: cpu-tiny\nservee: {}\n")
    expect_error(str(path), str(path), "servee", "unknown key")


def test_unknown_serve_key(tmp_path: Path) -> None:
    path = write(tmp_path, "bad", "extends: cpu-tiny\nserve:\n  max-num-seqz: 4\n")
    expect_error(str(path), str(path), "serve.max-num-seqz", "unknown vLLM option")
    path = write(tmp_path, "under", "extends: cpu-tiny\nserve:\n  max_num_seqs: 4\n")
    expect_error(str(path), "serve.max_num_seqs", "did you mean 'max-num-seqs'")


def test_bad_value_types(tmp_path: Path) -> None:
    cases = {
        "tensor-parallel-size: eight": ("serve.tensor-parallel-size", "integer"),
        "speculative-config: mtp": ("serve.speculative-config", "JSON object"),
        "speculative-config: [1, 2]": ("serve.speculative-config", "JSON object"),
        "enforce-eager: 'yes'": ("serve.enforce-eager", "true or false"),
        "gpu-memory-utilization: high": ("serve.gpu-memory-utilization", "number"),
        "dtype: float8": ("serve.dtype", "must be one of"),
        "port: 9000": ("serve.port", "top-level `port:`"),
    }
    for i, (line, (key, why)) in enumerate(cases.items()):
        path = write(tmp_path, f"bad{i}", f"extends: cpu-tiny\nserve:\n  {line}\n")
        expect_error(str(path), str(path), key, why)


def test_gpus_negative_and_missing_keys(tmp_path: Path) -> None:
    path = write(tmp_path, "neg", "extends: cpu-tiny\ngpus: -1\n")
    expect_error(str(path), str(path), "gpus", ">= 0")
    bare = "build: cpu-0.32.0\nmodel: m\ngpus: 0\nserve: {}\nworkload: cpu-tiny\n"
    path = write(tmp_path, "bare", bare)
    expect_error(str(path), str(path), "ready_timeout_s", "required")
    path = write(tmp_path, "sweep", "extends: cpu-tiny\nsweep:\n  point_timeout_s: many\n")
    expect_error(str(path), str(path), "sweep.point_timeout_s")
    # what the client sends is the workload file's, not the profile's
    path = write(tmp_path, "sweep", "extends: cpu-tiny\nsweep:\n  max_tokens: 16\n")
    expect_error(str(path), str(path), "sweep.max_tokens", "belongs in the workload file")


def test_unknown_build_and_parent(tmp_path: Path) -> None:
    path = write(tmp_path, "nob", "extends: cpu-tiny\nbuild: cpu-9.9\n")
    expect_error(str(path), str(path), "build", "unknown build 'cpu-9.9'")
    path = write(tmp_path, "nop", "extends: no-such-parent\n")
    expect_error(str(path), str(path), "extends", "no-such-parent")


def test_extends_cycle(tmp_path: Path) -> None:
    write(tmp_path, "a", "extends: b\n")
    write(tmp_path, "b", "extends: c\n")
    write(tmp_path, "c", "extends: a\n")
    expect_error(str(tmp_path / "a.yaml"), "extends", "cycle", "a -> b -> c -> a")


def test_error_names_the_file_that_set_the_key(tmp_path: Path) -> None:
    write(tmp_path, "parent", "extends: cpu-tiny\nserve:\n  max-num-seqs: lots\n")
    child = write(tmp_path, "child", "extends: parent\ndescription: child\n")
    message = expect_error(str(child), "serve.max-num-seqs")
    assert str(tmp_path / "parent.yaml") in message


def test_override_errors_name_the_override() -> None:
    message = expect_error(
        "cpu-tiny",
        "serve.tensor-parallel-size=eight",
        "integer",
        overrides=("serve.tensor-parallel-size=eight",),
    )
    assert "override" in message
    expect_error(
        "cpu-tiny", "serve.bogus-flag", "unknown vLLM option", overrides=("serve.bogus-flag=1",)
    )
    expect_error("cpu-tiny", "KEY=VALUE", overrides=("serve.max-num-seqs",))
    expect_error("cpu-tiny", "unknown key", overrides=("colour=blue",))


def test_unknown_profile_lists_known() -> None:
    expect_error("no-such-profile", "unknown profile", "cpu-tiny")


def test_cli_errors_exit_2_with_message(tmp_path: Path) -> None:
    path = write(tmp_path, "bad", "extends: cpu-tiny\nserve:\n  tensor-parallel-size: eight\n")
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from harness.cli import main; main()",
            "profiles",
            "show",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and "serve.tensor-parallel-size" in proc.stderr
