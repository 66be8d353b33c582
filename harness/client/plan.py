"""Which points a sweep runs, in which order, with which conversations.

The offsets are those of the blog's single `evalscope perf --number 4 16 32 48 64` command
(chained by `number`, docs/evalscope.md §4.2), so one process per point replays exactly the
conversations the single command would have replayed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.client.evalscope import ClientArgs, client_command
from harness.dataset.rotation import conversations_for_point
from harness.errors import ConfigError
from harness.results import point_id


@dataclass(frozen=True)
class PlannedPoint:
    point_id: str
    label: str
    parallel: int
    number: int
    repeat: int
    dataset_offset: int
    conversations: list[int]

    def identity(self, turns: int) -> dict[str, Any]:
        """The PointRecord fields that say which point this is and what it asked for."""
        return {
            "point_id": self.point_id,
            "label": self.label,
            "parallel": self.parallel,
            "number": self.number,
            "repeat": self.repeat,
            "dataset_offset": self.dataset_offset,
            "conversations": self.conversations,
            "turns": turns,
            "expected_requests": self.number * turns,
        }

    def client_command(
        self, args: ClientArgs, *, outputs_dir: Path, executable: Path | str
    ) -> list[str]:
        """The `evalscope perf` command that runs exactly this point."""
        return client_command(
            args,
            parallel=self.parallel,
            number=self.number,
            dataset_offset=self.dataset_offset,
            name=self.point_id,
            outputs_dir=outputs_dir,
            executable=executable,
        )


def _select(points: list[tuple[int, int]], only: Sequence[str] | None) -> set[int]:
    if not only:
        return set(range(len(points)))
    wanted = {item.strip() for entry in only for item in entry.split(",") if item.strip()}
    chosen: set[int] = set()
    for want in wanted:
        hits = {
            i
            for i, (p, n) in enumerate(points)
            if want in (f"c{p}", str(p), f"{p}x{n}", point_id(p, n, 0)[:-3])
        }
        if not hits:
            known = ", ".join(f"c{p}" for p, _ in points)
            raise ConfigError(f"--points: {want!r} is not a point of this sweep (points: {known})")
        chosen |= hits
    return chosen


def plan_points(
    points: list[tuple[int, int]],
    *,
    dataset_offset: int,
    num_conversations: int,
    repeats: int = 1,
    only: Sequence[str] | None = None,
) -> list[PlannedPoint]:
    """Points in run order (repeat-major), with the offsets of the blog's single command.

    Repeat r > 0 of a point advances its offset by r x number (mod the dataset size), so repeats
    replay fresh conversations while the dataset has them; repeat 0 is exactly the blog's.
    """
    if repeats < 1:
        raise ConfigError(f"--repeats must be >= 1, got {repeats}")
    chosen = _select(points, only)
    planned: list[PlannedPoint] = []
    for repeat in range(repeats):
        offset = dataset_offset
        for index, (parallel, number) in enumerate(points):
            point_offset = offset
            offset += number
            if index not in chosen:
                continue
            if repeat:
                point_offset = (point_offset + repeat * number) % max(num_conversations, 1)
            planned.append(
                PlannedPoint(
                    point_id(parallel, number, repeat),
                    f"c{parallel}",
                    parallel,
                    number,
                    repeat,
                    point_offset,
                    conversations_for_point(num_conversations, point_offset, number),
                )
            )
    return planned
