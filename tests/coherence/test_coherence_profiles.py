"""The coherence: block in profiles (strict, inherited, overridable), probe sets, the reference
store, and `repro coherence` without a live server (dry run; unreachable -> exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.manifests import minimal_manifest

from harness.cli import cli
from harness.coherence import check_for_sweep, plan_check, point_invalid_reason, run_check
from harness.coherence.check import load_reference
from harness.coherence.client import Reply
from harness.coherence.probes import load_probe_set
from harness.coherence.store import ReplySet, read_replies, reference_path, write_replies
from harness.errors import ConfigError
from harness.serve.profiles import load_profile
from harness.serve.server import free_port

# The blog's arms imply: MTP3 <-> no-MTP, HiSparse <-> offloading (docs/vllm.md §1.5).
BLOG_REFERENCES = {
    "hisparse384": "offload512",
    "hisparse384-nomtp": "offload512-nomtp",
    "offload512": "offload512-nomtp",
    "offload512-nomtp": None,
    "upstream-hisparse384": "upstream-offload512",
    "upstream-hisparse384-nomtp": "upstream-offload512-nomtp",
    "upstream-offload512": "upstream-offload512-nomtp",
    "upstream-offload512-nomtp": None,
}


@pytest.mark.parametrize(("arm", "reference"), sorted(BLOG_REFERENCES.items()))
def test_glm_blocks_validate_and_references_resolve(arm: str, reference: str | None) -> None:
    profile = load_profile(arm)
    plan = plan_check(profile)
    assert plan.reference == reference
    assert plan.probe_set.key == "glm-v1"
    mtp = bool(profile.serve.get("speculative-config"))
    assert (plan.spec.acceptance is not None) == mtp
    if reference:
        ref = load_profile(reference)
        assert plan.reference_file == reference_path(reference, "glm-v1")
        # a pair differs in exactly one thing: MTP (MTP3 <-> no-MTP) or where KV lives
        # (HiSparse <-> offloading)
        connector_differs = ref.serve.get("kv-transfer-config") != profile.serve.get(
            "kv-transfer-config"
        )
        mtp_differs = bool(ref.serve.get("speculative-config")) != mtp
        assert connector_differs != mtp_differs
    lc = plan.spec.long_context
    assert lc is not None and lc.context_tokens < profile.serve["max-model-len"]
    # pressure: needle + fillers beyond what stays GPU-resident, within the filler cap
    fillers = -(-(lc.overcommit * lc.resident_tokens - lc.context_tokens) // lc.context_tokens)
    assert 1 <= fillers <= lc.max_fillers


def test_cpu_mtp_arm_pairs_with_its_no_mtp_twin() -> None:
    plan = plan_check(load_profile("cpu-tiny-mtp"))
    assert plan.reference == "cpu-tiny-mtp-nomtp"
    assert plan.spec.agreement.min_positional == 1.0  # exact at greedy on CPU
    twin = load_profile("cpu-tiny-mtp-nomtp")
    assert "speculative-config" not in twin.serve and twin.coherence.acceptance is None
    assert twin.model == load_profile("cpu-tiny-mtp").model


def test_block_is_strict_and_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("extends: cpu-tiny\ncoherence:\n  probes: tiny-v1\n  thresholds: {}\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: key 'coherence\.thresholds': unknown key"):
        load_profile(str(bad))
    band = tmp_path / "band.yaml"
    band.write_text("extends: cpu-tiny\ncoherence:\n  acceptance: {min: 1.5}\n")
    with pytest.raises(ConfigError, match="a band needs serve.speculative-config"):
        plan_check(load_profile(str(band)))


def test_set_overrides_reach_the_block() -> None:
    profile = load_profile("cpu-tiny-mtp", ["coherence.reference=cpu-tiny", "serve.dtype=float32"])
    assert plan_check(profile).reference == "cpu-tiny"
    with pytest.raises(ConfigError, match="unknown profile 'nope'"):
        plan_check(load_profile("cpu-tiny-mtp", ["coherence.reference=nope"]))
    with pytest.raises(ConfigError, match="cannot be its own"):
        plan_check(load_profile("cpu-tiny-mtp", ["coherence.reference=cpu-tiny-mtp"]))


def test_probe_sets_are_versioned_by_file_name(tmp_path: Path) -> None:
    tiny = load_probe_set("tiny-v1")
    assert tiny.key == "tiny-v1" and len(tiny.probes) == 8
    assert load_probe_set("glm-v1").api == "chat"
    text = Path("launch/coherence/probes/tiny-v1.yaml").read_text()
    (tmp_path / "tiny-v2.yaml").write_text(text)
    with pytest.raises(ConfigError, match="differ from the file name 'tiny-v2'"):
        load_probe_set("tiny-v2", tmp_path)
    edited = text.replace("version: 1", "version: 2").replace("max_tokens: 32", "max_tokens: 31")
    (tmp_path / "tiny-v2.yaml").write_text(edited)
    assert load_probe_set("tiny-v2", tmp_path).sha256 != tiny.sha256
    with pytest.raises(ConfigError, match="known: tiny-v2"):
        load_probe_set("tiny-v3", tmp_path)


def test_reference_store_round_trip_and_stale_probe_set(tmp_path: Path) -> None:
    probe_set = load_probe_set("tiny-v1")
    replies = ReplySet(
        arm="cpu-tiny-mtp-nomtp",
        probe_set="tiny-v1",
        probe_set_sha256="0" * 64,
        replies=[Reply(id=p.id, token_ids=[1, 2]) for p in probe_set.probes],
    )
    path = write_replies(reference_path("cpu-tiny-mtp-nomtp", "tiny-v1", tmp_path), replies)
    assert path == tmp_path / "cpu-tiny-mtp-nomtp" / "tiny-v1.json"
    assert read_replies(path).by_id()["fib"].token_ids == [1, 2]
    plan = plan_check(load_profile("cpu-tiny-mtp"), references_dir=tmp_path)
    assert plan.reference_file == path
    # replies recorded for another state of the probe set cannot be judged against
    stale = load_reference(plan)
    assert (
        stale.status == "unjudged" and "changed since these replies were recorded" in stale.reason
    )
    write_replies(path, replies.model_copy(update={"probe_set_sha256": probe_set.sha256}))
    assert isinstance(load_reference(plan), ReplySet)
    missing = load_reference(
        plan_check(load_profile("cpu-tiny-mtp"), references_dir=tmp_path / "x")
    )
    assert "repro coherence --profile cpu-tiny-mtp-nomtp --record" in missing.reason


def test_unreachable_server_is_unjudged_exit_2(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    record = run_check(load_profile("cpu-tiny-mtp"), url, references_dir=tmp_path)
    assert record.verdict == "unjudged" and record.invalidates_points
    assert record.reason.startswith(f"could not judge: probing {url} failed")
    result = CliRunner().invoke(
        cli,
        ["coherence", "--profile", "cpu-tiny-mtp", "--url", url, "--json"],
        standalone_mode=False,
    )
    assert result.return_value == 2
    assert json.loads(result.output)["verdict"] == "unjudged"


def test_dry_run_prints_the_resolved_plan() -> None:
    result = CliRunner().invoke(
        cli, ["coherence", "--profile", "hisparse384", "--dry-run"], standalone_mode=False
    )
    assert result.exception is None and result.return_value == 0
    assert "probe set glm-v1 (8 probes, chat" in result.output
    assert "reference: offload512 (" in result.output
    assert "'resident_tokens': 2400000" in result.output


def test_points_are_invalid_unless_coherent_or_allowed(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    profile = load_profile("cpu-tiny")
    record = check_for_sweep(profile, url, allow_incoherent=False, run_dir=tmp_path)
    assert point_invalid_reason(record) == f"coherence unjudged: {record.reason}"
    # the record is what the manifest stores, and a run keeps it next to its replies
    assert json.loads((tmp_path / "coherence" / "result.json").read_text())["verdict"] == "unjudged"
    manifest_field = minimal_manifest(coherence=record.model_dump(mode="json")).coherence
    assert manifest_field == record
    allowed = check_for_sweep(profile, url, allow_incoherent=True)
    assert allowed.allow_incoherent and point_invalid_reason(allowed) is None
    no_block = load_profile("cpu-tiny", ["coherence=null"])
    assert check_for_sweep(no_block, url, allow_incoherent=False) is None


def test_against_a_run_directory_uses_its_stored_replies(tmp_path: Path) -> None:
    run = tmp_path / "cpu-tiny-mtp-nomtp-20261201-000000"
    probe_set = load_probe_set("tiny-v1")
    replies = ReplySet(
        arm="cpu-tiny-mtp-nomtp",
        probe_set="tiny-v1",
        probe_set_sha256=probe_set.sha256,
        replies=[Reply(id=p.id, token_ids=[3]) for p in probe_set.probes],
    )
    write_replies(run / "coherence" / "replies.json", replies)
    plan = plan_check(load_profile("cpu-tiny-mtp"), against=str(run))
    assert plan.reference == str(run)
    assert load_reference(plan).by_id()["fib"].token_ids == [3]
    empty = tmp_path / "empty-run"
    empty.mkdir()
    missing = load_reference(plan_check(load_profile("cpu-tiny-mtp"), against=str(empty)))
    assert missing.status == "unjudged" and "that run has no coherence replies" in missing.reason
