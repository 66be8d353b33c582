"""The sweep's coherence preflight (issue 14): an arm whose reference has no recorded replies for
its probe set is refused before a build, a dataset or a server costs anything, unless
--allow-incoherent (a warning, kept in the manifest) or --coherence-against names replies."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from support.manifests import minimal_manifest

from harness.cli import main
from harness.coherence.client import Reply
from harness.coherence.probes import REFERENCES_DIR, load_probe_set
from harness.coherence.references import MissingReference, coherence_preflight
from harness.coherence.store import ReplySet, reference_path, write_replies
from harness.errors import ConfigError
from harness.run.sweep import SweepRequest
from harness.serve.profiles import load_profile

# every GLM arm and its reference (tests/coherence/test_coherence_profiles.py: the blog's pairs)
GLM_ARMS = {
    "hisparse384": "offload512",
    "hisparse384-1m": "offload512",
    "hisparse384-nomtp": "offload512-nomtp",
    "offload512": "offload512-nomtp",
    "offload512-1m": "offload512-nomtp",
    "offload512-nomtp": None,
    "upstream-hisparse384": "upstream-offload512",
    "upstream-hisparse384-nomtp": "upstream-offload512-nomtp",
    "upstream-offload512": "upstream-offload512-nomtp",
    "upstream-offload512-nomtp": None,
}


def repro(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """`repro ARGS` in-process through main(): its exit code, stdout and stderr."""
    monkeypatch.setattr(sys, "argv", ["repro", *args])
    with pytest.raises(SystemExit) as exit_info:
        main()
    out = capsys.readouterr()
    return int(exit_info.value.code or 0), out.out, out.err


def write_run_replies(run: Path, arm: str, probe_key: str, *, sha: str | None = None) -> Path:
    probe_set = load_probe_set(probe_key)
    replies = ReplySet(
        arm=arm,
        probe_set=probe_key,
        probe_set_sha256=sha or probe_set.sha256,
        replies=[Reply(id=p.id, token_ids=[7]) for p in probe_set.probes],
    )
    return write_replies(run / "coherence" / "replies.json", replies)


def test_the_glm_references_are_not_recorded_yet() -> None:
    # the premise of the tests below; once a GPU night records them, these tests must change
    for ref in {r for r in GLM_ARMS.values() if r}:
        assert not reference_path(ref, "glm-v1").exists(), ref


@pytest.mark.parametrize(("arm", "reference"), sorted(GLM_ARMS.items()))
def test_every_glm_arm_dry_runs_or_names_its_missing_reference(
    monkeypatch, capsys, tmp_path: Path, arm: str, reference: str | None
) -> None:
    base = ("sweep", "--profile", arm, "--dry-run", "--out", str(tmp_path))
    code, out, err = repro(monkeypatch, capsys, *base)
    if reference is None:  # a reference arm compares against nothing: nothing can be missing
        assert code == 0, err
        assert "coherence: reference: none" in out and "dry run: nothing written" in out
        return
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    missing = REFERENCES_DIR / reference / "glm-v1.json"
    assert lines[0] == (
        f"error: profile {arm}: coherence reference {reference} has no recorded replies for "
        f"probe set glm-v1 (missing {missing}); every point would be invalid. Record the "
        f"reference first: `repro coherence --profile {reference} --record` (on the arms' "
        "hardware), or judge against a run of the reference arm with "
        "`--coherence-against RUN_DIR`, or count the points anyway with `--allow-incoherent`"
    )
    # allowed: a warning, and the plan as before
    code, out, err = repro(monkeypatch, capsys, *base, "--allow-incoherent")
    assert code == 0, err
    assert f"warning: coherence: profile {arm}: coherence reference {reference} has no " in out
    assert "--allow-incoherent: the points count unjudged" in out
    assert f"coherence: reference: {reference} ({missing}, MISSING)" in out
    assert "dry run: nothing written" in out and list(tmp_path.iterdir()) == []


def test_the_refusal_comes_before_the_gpu_check_and_writes_nothing(
    monkeypatch, capsys, tmp_path: Path
) -> None:
    # a real sweep (no --dry-run) on this GPU-less machine: the reference is named first
    code, _, err = repro(
        monkeypatch, capsys, "sweep", "--profile", "hisparse384", "--out", str(tmp_path)
    )
    assert code == 2 and "coherence reference offload512 has no recorded replies" in err
    assert list(tmp_path.iterdir()) == []


def test_coherence_against_a_run_with_replies_replaces_the_reference(
    monkeypatch, capsys, tmp_path: Path
) -> None:
    run = tmp_path / "nightly-x-offload512"
    write_run_replies(run, "offload512", "glm-v1")
    code, out, err = repro(
        monkeypatch, capsys, "sweep", "--profile", "hisparse384", "--dry-run",
        "--coherence-against", str(run), "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 0, err
    assert f"coherence: reference: {run} ({run / 'coherence' / 'replies.json'}, present)" in out
    assert "warning" not in out


def test_coherence_against_a_run_without_replies_is_the_same_error(
    monkeypatch, capsys, tmp_path: Path
) -> None:
    empty = tmp_path / "offload512-run"
    empty.mkdir()
    code, _, err = repro(
        monkeypatch, capsys, "sweep", "--profile", "hisparse384", "--dry-run",
        "--coherence-against", str(empty),
    )  # fmt: skip
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith(
        f"error: profile hisparse384: coherence reference run {empty} has no coherence replies "
        f"for probe set glm-v1 (missing {empty / 'coherence' / 'replies.json'}); every point "
        "would be invalid. Record the reference first: `repro coherence --profile offload512 "
        "--record`"
    )
    assert "`--coherence-against RUN_DIR`" in err and "`--allow-incoherent`" in err
    # replies of another probe set do not count either
    write_run_replies(empty, "cpu-tiny-mtp-nomtp", "tiny-v1")
    code, _, err = repro(
        monkeypatch, capsys, "sweep", "--profile", "hisparse384", "--dry-run",
        "--coherence-against", str(empty),
    )  # fmt: skip
    assert code == 2 and "recorded for probe set tiny-v1, not glm-v1" in err
    code, _, err = repro(
        monkeypatch, capsys, "sweep", "--profile", "hisparse384", "--dry-run",
        "--coherence-against", str(tmp_path / "nope" / "run"),
    )  # fmt: skip
    assert (
        code == 2
        and err == f"error: --coherence-against {tmp_path}/nope/run: no such run directory\n"
    )


def test_coherence_against_an_arm_uses_its_recorded_replies(monkeypatch, capsys) -> None:
    # cpu-tiny-mtp-nomtp is recorded in the repository; the MTP arm may name it explicitly
    code, _, err = repro(
        monkeypatch, capsys, "sweep", "--profile", "hisparse384", "--dry-run",
        "--coherence-against", "offload512-nomtp",
    )  # fmt: skip
    assert code == 2 and "coherence reference offload512-nomtp has no recorded replies" in err
    code, _, err = repro(
        monkeypatch, capsys, "sweep", "--profile", "cpu-tiny-mtp", "--dry-run",
        "--coherence-against", "cpu-tiny-mtp-nomtp", "--dataset", "nonexistent-recipe",
    )  # fmt: skip
    # the preflight passed: the next check (the dataset) is what fails
    assert "coherence" not in err and "nonexistent-recipe" in err


def test_stale_recorded_replies_are_refused_too(tmp_path: Path) -> None:
    profile = load_profile("cpu-tiny-mtp")
    path = write_run_replies(
        tmp_path / "store" / "cpu-tiny-mtp-nomtp", "x", "tiny-v1", sha="0" * 64
    )
    path.rename(reference_path("cpu-tiny-mtp-nomtp", "tiny-v1", tmp_path / "store"))
    request = SweepRequest("cpu-tiny-mtp")
    with pytest.raises(MissingReference, match="changed since these replies were recorded"):
        coherence_preflight(profile, request, references_dir=tmp_path / "store")
    # the simulated engine emits no real tokens: nothing is judged, nothing is required
    plan = coherence_preflight(
        profile, request, judges_replies=False, references_dir=tmp_path / "store"
    )
    assert plan.notes == [] and plan.plan.reference == "cpu-tiny-mtp-nomtp"


def test_against_needs_a_coherence_block_and_resume_keeps_the_override(tmp_path: Path) -> None:
    no_block = load_profile("cpu-tiny", ["coherence=null"])
    with pytest.raises(ConfigError, match="profile cpu-tiny has no coherence: block"):
        coherence_preflight(no_block, SweepRequest("cpu-tiny", coherence_against="cpu-tiny-mtp"))
    run = tmp_path / "ref-run"
    write_run_replies(run, "cpu-tiny-mtp-nomtp", "tiny-v1")

    # a resumed run's manifest: its override is the one used again
    manifest = minimal_manifest(
        status="partial", profile_name="cpu-tiny-mtp", coherence_against=str(run)
    )
    pre = coherence_preflight(load_profile("cpu-tiny-mtp"), SweepRequest(), manifest)
    assert pre.against == str(run) and pre.plan.reference_file == run / "coherence/replies.json"
    pre.record_in(manifest)
    pre.record_in(manifest)  # a resume records the note once
    assert manifest.notes == [f"coherence: judged against {run} (--coherence-against)"]
