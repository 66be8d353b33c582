"""Hub sources: which hub serves the rows, the pinned split/revision passed on, and failures.

No test reaches a hub. The real `datasets` opener is exercised in offline mode (it must fail
fast with a clear error); the network faults a hub produces (unreachable, a stream cut after
some rows) are played by stand-in openers, as a real hub cannot be made to fail on demand.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from harness.dataset import sources, synthetic
from harness.dataset.builder import build_dataset
from harness.dataset.recipe import make_recipe
from harness.dataset.sources import Source, collect_conversations
from harness.dataset.tok import TokenizerHandle
from harness.errors import DatasetError

NEBIUS = "nebius/SWE-rebench-openhands-trajectories"
PINNED = "35455389e4f5b2d1d8ac3a9c0e1f2a3b4c5d6e7f"


def _rows(count: int, fail_after: int | None = None) -> Iterator[dict[str, Any]]:
    for index in range(count):
        if fail_after is not None and index == fail_after:
            raise ConnectionError("stream reset by peer")
        row = synthetic.trajectory(5, index)
        row["resolved"] = True
        yield row


class Hubs:
    """Stand-in openers recording what each hub was asked for."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, **behaviour: Any):
        self.calls: list[tuple[str, str, str, str | None]] = []
        openers = {}
        for name, make in behaviour.items():

            def opener(spec, split, revision, _name=name, _make=make):
                self.calls.append((_name, spec, split, revision))
                return _make()

            openers[name] = opener
        monkeypatch.setattr(sources, "HUB_BACKENDS", openers)


def _unreachable() -> Iterator[dict[str, Any]]:
    raise ConnectionError("Couldn't reach the Hub (OfflineModeIsEnabled)")


def test_the_real_modelscope_opener_is_not_contacted_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(LookupError, match="HF_HUB_OFFLINE=1: ModelScope is a hub too"):
        sources._open_modelscope(NEBIUS, "train", PINNED)


def test_the_real_datasets_opener_fails_fast_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(Exception, match="(?i)offline|reach"):
        sources._open_datasets(NEBIUS, "train", PINNED)


def test_modelscope_serves_when_hugging_face_is_unreachable(monkeypatch):
    hubs = Hubs(monkeypatch, datasets=_unreachable, modelscope=lambda: _rows(6))
    source = Source(NEBIUS, split="train", revision=PINNED, role="trajectories")
    conversations, scan = collect_conversations(source, number=4, only_resolved=True, max_rows=None)
    assert len(conversations) == 4 and scan["rows_scanned"] == 4
    assert hubs.calls == [
        ("datasets", NEBIUS, "train", PINNED),
        ("modelscope", NEBIUS, "train", PINNED),
    ]
    assert source.provenance() == {
        "spec": NEBIUS,
        "kind": "hub",
        "split": "train",
        "revision": PINNED,
        "served_by": "modelscope",
    }


def test_a_stream_cut_after_some_rows_is_an_error_not_a_replay_from_the_other_hub(monkeypatch):
    hubs = Hubs(monkeypatch, datasets=lambda: _rows(10, fail_after=3), modelscope=lambda: _rows(10))
    source = Source(NEBIUS, split="train", revision=PINNED, role="trajectories")
    with pytest.raises(DatasetError, match="reading from datasets failed after 3 rows"):
        collect_conversations(source, number=8, only_resolved=False, max_rows=None)
    assert [call[0] for call in hubs.calls] == ["datasets"]


def test_no_hub_reachable_names_both_and_the_way_out(monkeypatch):
    Hubs(monkeypatch, datasets=_unreachable, modelscope=lambda: iter(()))
    source = Source(NEBIUS, split="train", revision=None, role="trajectories")
    with pytest.raises(DatasetError) as error:
        collect_conversations(source, number=2, only_resolved=False, max_rows=None)
    message = str(error.value)
    assert "datasets: ConnectionError" in message
    assert "modelscope: split 'train' has no rows" in message
    assert "revision unpinned" in message and "local parquet/JSONL" in message


def test_a_build_from_hub_ids_records_the_hub_and_revisions(monkeypatch, tmp_path):
    """The blog recipe's shape from hub ids: trajectories from one hub, pad text from the other."""

    def pad_rows() -> Iterator[dict[str, Any]]:
        for index in range(400):
            yield synthetic.pad_document(9, index)

    def opener(spec, split, revision):
        return _rows(40) if spec == NEBIUS else pad_rows()

    monkeypatch.setattr(sources, "HUB_BACKENDS", {"datasets": opener})
    recipe = make_recipe(
        {
            "tokenizer": "tiny:tokenizer",
            "trajectories": NEBIUS,
            "trajectories_revision": PINNED,
            "pad_source": "openscience",
            "pad_text": "nvidia/OpenScienceReasoning-2",
            "first_turn_length": 3000,
            "subsequent_turn_length": 200,
            "num_turns": 3,
            "number": 4,
        }
    )
    result = build_dataset(
        recipe, tmp_path / "hub.json", tokenizer=TokenizerHandle("tiny:tokenizer")
    )
    provenance = result.manifest["sources"]
    assert provenance["trajectories"]["served_by"] == "datasets"
    assert provenance["trajectories"]["revision"] == PINNED
    assert provenance["pad"]["spec"] == "nvidia/OpenScienceReasoning-2"
    assert provenance["pad"]["revision"] == "main (unpinned)"
    assert result.manifest["exactness"]["exact_turns"] == 12
