"""The simulated arms' accepted history (harness/gate/history.py, the one reader and writer of
accepted history): JSON lines, appended atomically, the committed file read as written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.gate.history import DEFAULT_SIMULATED_HISTORY, SimulatedEntry, SimulatedHistory


def _entry(arm: str, value: float, reason: str = "r") -> SimulatedEntry:
    return SimulatedEntry(
        arm=arm,
        accepted_at="2026-12-04T20:00:00Z",
        reason=reason,
        commit=None,
        harness_version="test",
        inputs={"profile": "p"},
        points={"p001-n0004-r0": {"valid": True, "metrics.occupancy": value}},
    )


def test_the_committed_history_loads_as_written() -> None:
    before = DEFAULT_SIMULATED_HISTORY.read_bytes()
    history = SimulatedHistory.open()
    lines = before.decode().splitlines()
    assert len(history.entries) == len(lines) > 0
    assert [e.model_dump_json() for e in history.entries] == lines  # field for field
    assert {e.arm for e in history.entries} >= {"hisparse384", "offload512"}
    assert DEFAULT_SIMULATED_HISTORY.read_bytes() == before


def test_append_then_the_latest_entry_per_arm(tmp_path: Path) -> None:
    path = tmp_path / "h" / "accepted.jsonl"
    history = SimulatedHistory.open(path)
    assert history.entries == [] and history.latest("a") is None and not path.exists()
    history.append([_entry("a", 1.0), _entry("b", 2.0)])
    history.append([_entry("a", 3.0, reason="moved")])
    again = SimulatedHistory.open(path)
    assert [e.arm for e in again.entries] == ["a", "b", "a"] == [e.arm for e in history.entries]
    latest = again.latest("a")
    assert latest is not None and latest.reason == "moved"
    assert latest.points["p001-n0004-r0"]["metrics.occupancy"] == 3.0
    assert path.read_text().count("\n") == 3


def test_an_append_after_a_hand_edit_without_final_newline_keeps_lines_whole(
    tmp_path: Path,
) -> None:
    path = tmp_path / "accepted.jsonl"
    path.write_text(_entry("a", 1.0).model_dump_json())  # no trailing newline
    SimulatedHistory.open(path).append([_entry("b", 2.0)])
    assert [e.arm for e in SimulatedHistory.open(path).entries] == ["a", "b"]


def test_a_malformed_line_names_the_file_line_and_key(tmp_path: Path) -> None:
    path = tmp_path / "accepted.jsonl"
    bad = {**json.loads(_entry("b", 2.0).model_dump_json()), "surprise": 1}
    path.write_text(_entry("a", 1.0).model_dump_json() + "\n\n" + json.dumps(bad) + "\n")
    with pytest.raises(ConfigError, match=r"accepted\.jsonl:3: surprise: Extra inputs"):
        SimulatedHistory.open(path)
