"""Hub reachability and credentials for what a profile names: its model, and the tokenizer and
datasets of its sweep's dataset recipe. With HF_HUB_OFFLINE=1 the hub is not contacted: the
check is whether the local hub cache holds each repo (at its pinned revision)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import requests

from harness import env as harness_env
from harness.errors import ConfigError
from harness.serve.checks import Check
from harness.serve.profiles import Profile

HUB = "https://huggingface.co"
TIMEOUT_S = 5.0


@dataclass(frozen=True)
class HubRef:
    role: str  # model / tokenizer / trajectories / pad_text
    repo: str
    kind: str  # models / datasets
    revision: str | None
    key: str  # where it is named, e.g. datasets/openhands-glm53.yaml: pad_revision


def _is_hub_id(spec: str) -> bool:
    return (
        spec.count("/") == 1
        and not spec.startswith((".", "/", "~", "tiny:"))
        and not Path(spec).expanduser().exists()
    )


def hub_refs(profile: Profile) -> list[HubRef]:
    from harness.dataset.recipe import load_recipe, recipe_path

    refs = []
    if _is_hub_id(profile.model):
        refs.append(HubRef("model", profile.model, "models", None, f"{profile.source}: model"))
    try:
        recipe = load_recipe(profile.sweep.dataset)
    except ConfigError:
        return refs  # a dataset given as a built file: nothing on the hub
    where = str(recipe_path(profile.sweep.dataset))
    for role, repo, kind, revision, key in (
        ("tokenizer", recipe.tokenizer, "models", recipe.tokenizer_revision, "tokenizer_revision"),
        (
            "trajectories",
            recipe.trajectories,
            "datasets",
            recipe.trajectories_revision,
            "trajectories_revision",
        ),
        ("pad_text", recipe.pad_text, "datasets", recipe.pad_revision, "pad_revision"),
    ):
        if role == "pad_text" and recipe.pad_source != "openscience":
            continue
        if _is_hub_id(repo) and not any(r.repo == repo and r.kind == kind for r in refs):
            refs.append(HubRef(role, repo, kind, revision, f"{where}: {key}"))
    return refs


def _cache_root() -> Path:
    return harness_env.hf_hub_cache()


def cached(ref: HubRef, root: Path | None = None) -> bool:
    folder = (root or _cache_root()) / f"{ref.kind}--{ref.repo.replace('/', '--')}"
    if ref.revision:
        return (folder / "snapshots" / ref.revision).is_dir()
    return (folder / "refs" / "main").is_file()


def _token() -> str | None:
    token = harness_env.text("HF_TOKEN") or harness_env.text("HUGGING_FACE_HUB_TOKEN")
    if token:
        return token
    try:
        from huggingface_hub import get_token

        return get_token()
    except Exception:  # noqa: BLE001 - no huggingface_hub, or no token file
        return None


def _online(ref: HubRef, get: Callable[..., requests.Response]) -> Check:
    kind = "" if ref.kind == "models" else "datasets/"
    url = f"{HUB}/api/{ref.kind}/{ref.repo}/revision/{ref.revision or 'main'}"
    token = _token()
    name = f"hub-{ref.role}"
    try:
        resp = get(
            url, timeout=TIMEOUT_S, headers={"Authorization": f"Bearer {token}"} if token else {}
        )
    except requests.RequestException as exc:
        return Check(
            name,
            "warn",
            f"{ref.repo}: hub unreachable in {TIMEOUT_S:g} s ({type(exc).__name__})",
            "check the proxy/network, or pre-populate the hub cache and set HF_HUB_OFFLINE=1",
        )
    if resp.status_code == 200:
        return Check(name, "ok", f"{ref.repo}@{ref.revision or 'main'} reachable")
    if resp.status_code in (401, 403):
        return Check(
            name,
            "fail",
            f"{ref.repo}: HTTP {resp.status_code} ({'no token' if not token else 'token refused'})",
            f"accept the terms at {HUB}/{kind}{ref.repo} and `huggingface-cli login` or set "
            "HF_TOKEN",
        )
    return Check(
        name,
        "fail",
        f"{ref.repo}: revision {ref.revision or 'main'} not found (HTTP {resp.status_code})",
        f"fix {ref.key}",
    )


def hub_checks(
    profile: Profile, *, get: Callable[..., requests.Response] | None = None
) -> list[Check]:
    refs = hub_refs(profile)
    if not refs:
        return [Check("hub", "ok", "profile and dataset recipe name nothing on a hub")]
    if harness_env.text("HF_HUB_OFFLINE") == "1":
        checks = []
        for ref in refs:
            here = cached(ref)
            checks.append(
                Check(
                    f"hub-{ref.role}",
                    "ok" if here else "warn",
                    f"HF_HUB_OFFLINE=1: {ref.repo}@{ref.revision or 'main'} "
                    f"{'in' if here else 'NOT in'} the hub cache {_cache_root()}",
                    "download it on a networked machine into HF_HUB_CACHE, or unset HF_HUB_OFFLINE",
                )
            )
        return checks
    session = requests.Session()
    return [_online(ref, get or session.get) for ref in refs]
