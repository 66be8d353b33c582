"""Issue 26, item 2 (writer side): a simulated run's manifest says `complete` only once every
point and the summary it promises are on disk; an interrupted writer leaves `partial`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import harness.sim.run as sim_run
from harness.records import run_damage
from harness.results import load_run
from harness.sim.run import run_simulation

SETS = ["sweep.points=[[1,2],[2,4],[4,8]]", "sweep.scrape_interval_s=2"]


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    recipe = tmp_path_factory.mktemp("sim") / "small.yaml"
    recipe.write_text(
        "number: 10\nnum_turns: 2\nfirst_turn_length: 3000\nsubsequent_turn_length: 200\n"
    )
    return recipe


def _status(run_dir: Path) -> str:
    return str(json.loads((run_dir / "manifest.json").read_text())["status"])


def _interrupt_at(monkeypatch: pytest.MonkeyPatch, name: str, call: int) -> None:
    """Make harness.sim.run's `name` raise KeyboardInterrupt (Ctrl-C) on its `call`-th call."""
    real = getattr(sim_run, name)
    calls = {"n": 0}

    def cut(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == call:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(sim_run, name, cut)


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("write_samples_csv", 2),  # the second point's samples
        ("write_point_table", 3),  # the last point
        ("write_summary", 1),  # every point written, the summary not
    ],
)
def test_an_interrupted_simulated_run_is_never_complete(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, call: int
) -> None:
    _interrupt_at(monkeypatch, name, call)
    with pytest.raises(KeyboardInterrupt):
        run_simulation("offload512", dataset=str(small), overrides=SETS, out=tmp_path, run_id="cut")
    run_dir = tmp_path / "cut"
    assert _status(run_dir) == "partial"  # before: "complete" with fewer points than planned
    run = load_run(run_dir)
    assert len(run.manifest.planned_points) == 3 and run.manifest.finished_at is None
    assert run_damage(run) == []  # partial is what it says: not a complete run that lies


def test_a_finished_simulated_run_is_complete_with_every_point(small: Path, tmp_path: Path) -> None:
    run_dir = run_simulation(
        "offload512", dataset=str(small), overrides=SETS, out=tmp_path, run_id="whole"
    )
    run = load_run(run_dir)
    assert run.manifest.status == "complete" and run.manifest.finished_at is not None
    assert len(run.points) == 3 and run_damage(run) == []
    assert (run_dir / "summary.json").is_file()
    assert not [p.name for p in run_dir.iterdir() if p.name.startswith(".")]  # no temp files
