"""The nightly's arm order by coherence reference (issue 14): an arm whose reference has no
recorded replies runs after that reference arm and is judged against its run of the night; a
reference neither recorded nor among the arms, or a cycle, is an error before the build."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.gate_runs import write_run

from harness.cluster import submit
from harness.errors import ConfigError, ReproError
from harness.gate import nightly
from harness.gate.order import order_arms
from harness.run.sweep import SweepRequest

UPSTREAM = [  # the GPU job's arms (.github/workflows/nightly.yml), in its order
    "upstream-hisparse384",
    "upstream-offload512",
    "upstream-hisparse384-nomtp",
    "upstream-offload512-nomtp",
]


def test_unrecorded_references_run_first() -> None:
    order = order_arms(UPSTREAM)
    assert [(e.arm, e.after, e.level) for e in order] == [
        ("upstream-offload512-nomtp", None, 0),
        ("upstream-offload512", "upstream-offload512-nomtp", 1),
        ("upstream-hisparse384-nomtp", "upstream-offload512-nomtp", 1),
        ("upstream-hisparse384", "upstream-offload512", 2),
    ]
    # every arm comes after the arm it is judged against
    position = {e.arm: i for i, e in enumerate(order)}
    assert all(position[e.after] < position[e.arm] for e in order if e.after)


def test_recorded_references_keep_the_given_order(tmp_path: Path) -> None:
    # cpu-tiny-mtp-nomtp's tiny-v1 replies are in the repository: no arm waits for another
    order = order_arms(["cpu-tiny-mtp", "cpu-tiny-mtp-nomtp", "cpu-tiny"])
    assert [(e.arm, e.after, e.reference, e.checked) for e in order] == [
        ("cpu-tiny-mtp", None, "cpu-tiny-mtp-nomtp", True),
        ("cpu-tiny-mtp-nomtp", None, None, True),
        ("cpu-tiny", None, None, True),
    ]
    # an empty store: now the MTP arm waits for its twin's run
    order = order_arms(["cpu-tiny-mtp", "cpu-tiny-mtp-nomtp"], references_dir=tmp_path)
    assert [(e.arm, e.after) for e in order] == [
        ("cpu-tiny-mtp-nomtp", None),
        ("cpu-tiny-mtp", "cpu-tiny-mtp-nomtp"),
    ]
    assert not order_arms(["cpu-tiny"], ["coherence=null"])[0].checked


def test_a_reference_neither_recorded_nor_run_is_an_error_naming_both() -> None:
    with pytest.raises(ConfigError) as info:
        order_arms(["upstream-hisparse384", "upstream-offload512-nomtp"])
    message = str(info.value)
    assert message.startswith(
        "nightly arm upstream-hisparse384: its coherence reference upstream-offload512 has no "
        "recorded replies for probe set glm-v1"
    )
    assert "add upstream-offload512 to --profiles" in message
    assert "`repro coherence --profile upstream-offload512 --record`" in message


def test_a_cycle_of_unrecorded_references_is_an_error_naming_both(tmp_path: Path) -> None:
    # a twin that names the MTP arm back as its reference, with nothing recorded
    twin = tmp_path / "cpu-tiny-mtp-nomtp.yaml"
    twin.write_text("extends: cpu-tiny-mtp\ncoherence:\n  reference: cpu-tiny-mtp\n")
    with pytest.raises(ConfigError) as info:
        order_arms(["cpu-tiny-mtp", str(twin)], references_dir=tmp_path / "store")
    message = str(info.value)
    assert "nightly arms " in message and "form a cycle with no recorded replies" in message
    assert "cpu-tiny-mtp -> cpu-tiny-mtp-nomtp -> cpu-tiny-mtp" in message


def test_the_nightly_runs_the_reference_first_and_judges_against_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run_nightly with the sweep replaced by a synthetic run writer: the order, each arm's
    --coherence-against and the summary's note of what each arm was judged against."""
    requests: list[SweepRequest] = []

    def fake_sweep(request: SweepRequest, echo=print) -> Path:
        requests.append(request)
        return write_run(Path(request.out), request.run_id, np.random.default_rng(0))

    monkeypatch.setattr(nightly, "run_sweep", fake_sweep)
    monkeypatch.setattr(nightly, "resolve_build", lambda build, echo: (build, {}))
    result = nightly.run_nightly(
        UPSTREAM[:2] + UPSTREAM[3:],
        "vllm-0.32.0",
        out=tmp_path,
        history_path=tmp_path / "history.sqlite",
        dashboard=False,
        echo=lambda _msg: None,
    )
    stamp = result.stamp
    assert [(r.profile, r.coherence_against) for r in requests] == [
        ("upstream-offload512-nomtp", None),
        (
            "upstream-offload512",
            str(tmp_path / f"nightly-{stamp}-upstream-offload512-nomtp"),
        ),
        ("upstream-hisparse384", str(tmp_path / f"nightly-{stamp}-upstream-offload512")),
    ]
    summary = result.summary_path.read_text(encoding="utf-8")
    assert (
        "coherence judged against tonight's upstream-offload512 run "
        f"(nightly-{stamp}-upstream-offload512)"
    ) in summary
    assert "coherence: a reference arm" in summary
    notes = {a.profile: a.notes[0] for a in result.arms}
    assert notes["upstream-offload512"].endswith(f"(nightly-{stamp}-upstream-offload512-nomtp)")


def test_the_nightly_refuses_before_the_build(tmp_path: Path, monkeypatch) -> None:
    def no_build(build, echo):
        raise AssertionError("the build must not start")

    monkeypatch.setattr(nightly, "resolve_build", no_build)
    with pytest.raises(ConfigError, match="nightly arm upstream-hisparse384: its coherence"):
        nightly.run_nightly(["upstream-hisparse384"], "vllm-0.32.0", out=tmp_path)


def test_slurm_arms_are_submitted_level_by_level(tmp_path: Path, monkeypatch) -> None:
    """With --executor slurm the arms are jobs: a level waits for the one before it, and an arm
    whose reference arm failed is not submitted at all."""
    waves: list[list[tuple[str, str | None]]] = []

    def fake_jobs(requests, options, echo):
        waves.append([(r.profile, r.coherence_against) for r in requests])
        return [
            ReproError("sbatch: node lost")
            if r.profile == "upstream-offload512"
            else Path(r.out) / r.run_id
            for r in requests
        ]

    monkeypatch.setattr(submit, "run_as_jobs", fake_jobs)
    order = order_arms(UPSTREAM)
    against = {e.arm: f"{tmp_path}/nightly-s-{e.after}" for e in order if e.after}
    _, outcomes = nightly._sweep_arms_as_jobs(
        order, "vllm-0.32.0", [], tmp_path, "s", None, print, against
    )
    nomtp = f"{tmp_path}/nightly-s-upstream-offload512-nomtp"
    assert waves == [
        [("upstream-offload512-nomtp", None)],
        [("upstream-offload512", nomtp), ("upstream-hisparse384-nomtp", nomtp)],
    ]  # level 2 (upstream-hisparse384) was never submitted: its reference arm failed
    assert str(outcomes["upstream-hisparse384"]) == (
        "not run: reference arm upstream-offload512: sbatch: node lost"
    )
    assert (
        outcomes["upstream-hisparse384-nomtp"] == tmp_path / "nightly-s-upstream-hisparse384-nomtp"
    )
