"""`repro k8s render`: manifests validated offline against Kubernetes' own schemas
(kubernetes-validate ships them), with GPUs, server and results volume from the profile."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

from harness.cli import cli
from harness.errors import ConfigError

K8S_VERSION = "1.30.0"


def render(tmp_path, *args: str) -> dict[str, dict]:
    out = tmp_path / "k8s"
    done = CliRunner().invoke(cli, ["k8s", "render", *args, "--out", str(out)])
    assert done.exit_code == 0, done.output
    docs = {}
    for path in sorted(out.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
            docs[doc["kind"]] = doc
    return docs


def test_gpu_profile_renders_valid_server_job_and_volume(tmp_path):
    docs = render(
        tmp_path,
        *("--profile", "hisparse384", "--image", "vllm/vllm-openai:v0.32.0", "--allow-incoherent"),
    )
    assert set(docs) == {"PersistentVolumeClaim", "Pod", "Service", "Job"}
    server = docs["Pod"]["spec"]["containers"][0]
    assert server["image"] == "vllm/vllm-openai:v0.32.0"
    assert server["resources"]["limits"] == {"nvidia.com/gpu": 8}
    assert server["command"] == ["vllm"] and server["args"][:2] == ["serve", "zai-org/GLM-5.3"]
    assert server["args"][server["args"].index("--tensor-parallel-size") + 1] == "8"
    assert server["args"][server["args"].index("--host") + 1] == "0.0.0.0"
    assert docs["Service"]["spec"]["selector"] == docs["Pod"]["metadata"]["labels"]
    job = docs["Job"]["spec"]["template"]["spec"]
    sweep = job["containers"][0]
    url = f"http://{docs['Service']['metadata']['name']}:8000"
    assert sweep["args"][:5] == ["sweep", "--profile", "hisparse384", "--url", url]
    assert sweep["args"][-1] == "--allow-incoherent"  # the Job's sweep counts its points too
    assert sweep["volumeMounts"] == [{"name": "results", "mountPath": "/results"}]
    claim = docs["PersistentVolumeClaim"]["metadata"]["name"]
    assert job["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim


def test_cpu_profile_requests_no_gpu_and_keeps_overrides(tmp_path):
    docs = render(tmp_path, "--profile", "cpu-tiny", "--set", "sweep.max_tokens=16")
    server = docs["Pod"]["spec"]["containers"][0]
    assert "limits" not in server["resources"]
    assert {"name": "VLLM_CPU_KVCACHE_SPACE", "value": "1"} in server["env"]
    args = docs["Job"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-2:] == ["--set", "sweep.max_tokens=16"]


def test_schema_validation_would_catch_a_broken_manifest(tmp_path):
    docs = render(tmp_path, "--profile", "cpu-tiny")
    broken = docs["Job"]
    broken["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] = 5
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_bad_image_or_profile_is_an_error(tmp_path):
    done = CliRunner().invoke(cli, ["k8s", "render", "--profile", "cpu-tiny", "--image", "a b"])
    assert isinstance(done.exception, ConfigError) and "--image 'a b'" in str(done.exception)
    done = CliRunner().invoke(cli, ["k8s", "render", "--profile", "no-such-profile"])
    assert done.exit_code != 0


def test_an_arm_without_its_recorded_reference_is_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "k8s"
    args = ["k8s", "render", "--profile", "hisparse384", "--out", str(out)]
    done = CliRunner().invoke(cli, args)
    assert done.exit_code != 0
    message = str(done.exception)
    assert "coherence reference offload512 has no recorded replies" in message
    assert "--allow-incoherent" in message
    assert not out.exists()
    # the reference arm itself needs no reference: rendered, without the flag
    docs = render(tmp_path, "--profile", "offload512-nomtp")
    assert (
        "--allow-incoherent" not in docs["Job"]["spec"]["template"]["spec"]["containers"][0]["args"]
    )
