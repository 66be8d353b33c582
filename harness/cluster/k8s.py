"""Kubernetes manifests for one sweep: the vLLM server pod (+ service), the results volume, and
a Job that runs `repro sweep --url` against the server. Rendered only: this harness reaches no
cluster (`kubectl apply -f DIR` is the user's step).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from harness.coherence.references import coherence_preflight
from harness.errors import ConfigError
from harness.results import atomic_write_text
from harness.run.sweep import SweepRequest
from harness.serve.profiles import Profile, render_serve_command

RESULTS_MOUNT = "/results"
DEFAULT_IMAGE = "vllm/vllm-openai:latest"
DEFAULT_HARNESS_IMAGE = "repro:latest"
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*")


def k8s_name(text: str) -> str:
    """A DNS-1123 label: lowercase letters, digits and '-', at most 63 characters."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63].rstrip("-")
    if not name:
        raise ConfigError(f"{text!r}: cannot make a Kubernetes name of it")
    return name


def _check_image(image: str, option: str) -> str:
    if not _IMAGE.fullmatch(image):
        raise ConfigError(f"{option} {image!r}: not an image reference (REGISTRY/NAME:TAG)")
    return image


def _labels(base: str, part: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "repro",
        "app.kubernetes.io/instance": base,
        "repro/part": part,
    }


def _server(profile: Profile, base: str, image: str) -> list[dict[str, Any]]:
    port = profile.port
    argv = render_serve_command(profile, port=port, executable="vllm")
    argv[argv.index("--host") + 1] = "0.0.0.0"  # reachable through the service
    resources: dict[str, Any] = {"requests": {"cpu": "2", "memory": "8Gi"}}
    if profile.gpus > 0:
        resources["limits"] = {"nvidia.com/gpu": profile.gpus}
        resources["requests"]["nvidia.com/gpu"] = profile.gpus
    labels = _labels(base, "server")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{base}-vllm", "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "vllm",
                    "image": image,
                    "command": argv[:1],
                    "args": argv[1:],
                    "env": [{"name": k, "value": str(v)} for k, v in sorted(profile.env.items())],
                    "ports": [{"name": "http", "containerPort": port}],
                    "resources": resources,
                    "readinessProbe": {
                        "httpGet": {"path": "/health", "port": port},
                        "periodSeconds": 10,
                        "failureThreshold": max(int(profile.ready_timeout_s // 10), 1),
                    },
                    "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
                }
            ],
            # vLLM's workers talk through shared memory; the default 64 MiB is too small
            "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}],
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"{base}-vllm", "labels": labels},
        "spec": {"selector": labels, "ports": [{"name": "http", "port": port, "targetPort": port}]},
    }
    return [pod, service]


def _sweep_job(
    profile: Profile, base: str, image: str, overrides: list[str], claim: str, extra: list[str]
) -> dict[str, Any]:
    url = f"http://{base}-vllm:{profile.port}"
    argv = ["repro", "sweep", "--profile", profile.name, "--url", url, "--out", RESULTS_MOUNT]
    for item in overrides:
        argv += ["--set", item]
    argv += extra
    wait = (
        "import time, urllib.request\n"
        "for _ in range(360):\n"
        "    try:\n"
        f"        urllib.request.urlopen({url + '/health'!r}, timeout=5); break\n"
        "    except OSError: time.sleep(10)\n"
        "else: raise SystemExit('server not ready after 1 h')\n"
    )
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"{base}-sweep", "labels": _labels(base, "sweep")},
        "spec": {
            "backoffLimit": 0,  # a failed sweep is resumed (`repro sweep --resume`), not retried
            "template": {
                "metadata": {"labels": _labels(base, "sweep")},
                "spec": {
                    "restartPolicy": "Never",
                    "initContainers": [
                        {
                            "name": "wait-for-server",
                            "image": image,
                            "command": ["python", "-c", wait],
                        }
                    ],
                    "containers": [
                        {
                            "name": "sweep",
                            "image": image,
                            "command": argv[:1],
                            "args": argv[1:],
                            "env": [
                                {"name": "REPRO_RESULTS", "value": RESULTS_MOUNT},
                                {"name": "HF_HUB_OFFLINE", "value": "1"},
                            ],
                            "volumeMounts": [{"name": "results", "mountPath": RESULTS_MOUNT}],
                        }
                    ],
                    "volumes": [{"name": "results", "persistentVolumeClaim": {"claimName": claim}}],
                },
            },
        },
    }


def _results_claim(claim: str, size: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "labels": {"app.kubernetes.io/name": "repro"}},
        "spec": {
            "accessModes": ["ReadWriteMany"],  # runs are read by reports from anywhere
            "resources": {"requests": {"storage": size}},
        },
    }


def render(
    profile: Profile,
    *,
    image: str = DEFAULT_IMAGE,
    harness_image: str = DEFAULT_HARNESS_IMAGE,
    overrides: list[str] | None = None,
    claim: str = "repro-results",
    size: str = "100Gi",
    allow_incoherent: bool = False,
    echo: Callable[[str], None] = print,
) -> dict[str, list[dict[str, Any]]]:
    """File name -> the resources it holds. The Job's sweep would refuse an arm whose coherence
    reference has no recorded replies only after the model load: refused here instead."""
    request = SweepRequest(profile=profile, allow_incoherent=allow_incoherent)
    coherence_preflight(profile, request, echo=echo)
    extra = ["--allow-incoherent"] if allow_incoherent else []
    base = k8s_name(f"repro-{profile.name}")
    if k8s_name(claim) != claim:  # it names a claim that may already exist: never rename it
        raise ConfigError(
            f"--results-claim {claim!r}: not a Kubernetes name (lowercase letters, digits, '-'; "
            f"at most 63), e.g. {k8s_name(claim)!r}"
        )
    if not re.fullmatch(r"[1-9]\d*(Mi|Gi|Ti)", size):  # 0Gi: a claim nothing fits in
        raise ConfigError(f"--results-size {size!r}: expected e.g. 100Gi")
    image = _check_image(image, "--image")
    harness_image = _check_image(harness_image, "--harness-image")
    return {
        "results-volume.yaml": [_results_claim(claim, size)],
        "vllm-server.yaml": _server(profile, base, image),
        "sweep-job.yaml": [
            _sweep_job(profile, base, harness_image, list(overrides or []), claim, extra)
        ],
    }


def write(manifests: dict[str, list[dict[str, Any]]], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, docs in manifests.items():
        path = out / name
        # temp file + rename (harness/results.py): `kubectl apply` never reads half a manifest
        atomic_write_text(path, yaml.safe_dump_all(docs, sort_keys=False))
        written.append(path)
    return written


def apply_hint(out: Path) -> str:
    return f"kubectl apply -f {shlex.quote(str(out))}"
