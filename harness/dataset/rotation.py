"""EvalScope's `--dataset-offset` rotation (docs/evalscope.md §4.2), reproduced exactly.

The pinned loader rotates the conversation list to `conv[offset:] + conv[:offset]` when
`offset > 0` (no modulo: an offset >= len leaves the order unchanged), preloads at most `number`
conversations, and workers cycle through that list when `number` exceeds it. After each point
the driver does `dataset_offset += number`.
"""

from __future__ import annotations

from typing import Any

from harness.text import int_ranges


def point_offsets(offset: int, numbers: list[int]) -> list[int]:
    """The `dataset_offset` each point runs with: 52, 56, 72, 104, 152 for the blog sweep."""
    offsets: list[int] = []
    current = offset
    for number in numbers:
        offsets.append(current)
        current += number
    return offsets


def rotated_order(num_conversations: int, offset: int) -> list[int]:
    """Dataset indices in the order the swe_smith loader yields them for one offset."""
    order = list(range(num_conversations))
    if offset > 0:
        order = order[offset:] + order[:offset]
    return order


def conversations_for_point(num_conversations: int, offset: int, number: int) -> list[int]:
    """The dataset index of each of the `number` conversations one point replays, in claim order."""
    if num_conversations <= 0 or number <= 0:
        return []
    loaded = rotated_order(num_conversations, offset)[:number]
    return [loaded[k % len(loaded)] for k in range(number)]


def conversations_for_points(
    num_conversations: int, offset: int, numbers: list[int]
) -> list[list[int]]:
    """The exact dataset indices each point of a sweep replays (one list per point)."""
    return [
        conversations_for_point(num_conversations, point_offset, number)
        for point_offset, number in zip(point_offsets(offset, numbers), numbers, strict=True)
    ]


def fresh_size(offset: int, numbers: list[int]) -> int:
    """Smallest dataset size at which no point replays a conversation an earlier point used.

    At least sum(numbers); at most offset + sum(numbers) (then every offset is < len and each
    point reads the block right after the previous one). The blog sweep needs 164: c32 then
    wraps into 0-51, which no earlier point touched.
    """
    total = sum(numbers)
    for size in range(max(total, 1), offset + total + 1):
        if _all_fresh(size, offset, numbers):
            return size
    return offset + total


def _all_fresh(size: int, offset: int, numbers: list[int]) -> bool:
    """Whether every point of the sweep replays conversations no point replays (itself
    included) on a dataset of `size`: what `conversations_for_points` gives, compared as
    arcs of the circle of indices, so a check costs O(points), not O(size); fresh_size tries
    up to `offset` sizes (an offset of 100,000 was an hour's work)."""
    arcs: list[tuple[int, int]] = []
    for point_offset, number in zip(point_offsets(offset, numbers), numbers, strict=True):
        if number <= 0:
            continue  # no conversations
        if number > size:
            return False  # workers cycle through the preloaded list: a repeat within the point
        start = point_offset if 0 < point_offset < size else 0  # rotated_order's rule
        end = start + number
        arcs += [(start, size), (0, end - size)] if end > size else [(start, end)]
    arcs.sort()
    return all(arcs[i][0] >= arcs[i - 1][1] for i in range(1, len(arcs)))


def reuse_report(num_conversations: int, offset: int, numbers: list[int]) -> dict[str, Any]:
    """Which points replay which conversations, and which of them an earlier point already used.

    Returns {"num_conversations", "offset", "numbers", "fresh_size", "points": [{"index",
    "number", "offset", "conversations", "ranges", "reused", "reused_from", "repeats_within"}],
    "total_reused", "warnings"}.
    """
    points: list[dict[str, Any]] = []
    first_user: dict[int, int] = {}
    warnings: list[str] = []
    total_reused = 0
    per_point = conversations_for_points(num_conversations, offset, numbers)
    for index, (point_offset, number, convs) in enumerate(
        zip(point_offsets(offset, numbers), numbers, per_point, strict=True)
    ):
        unique = list(dict.fromkeys(convs))
        reused = [c for c in unique if c in first_user]
        reused_from: dict[int, list[int]] = {}
        for conv in reused:
            reused_from.setdefault(first_user[conv], []).append(conv)
        repeats_within = len(convs) - len(unique)
        points.append(
            {
                "index": index,
                "number": number,
                "offset": point_offset,
                "rotated": 0 < point_offset < num_conversations,
                "conversations": convs,
                "ranges": int_ranges(convs),
                "reused": reused,
                "reused_from": {str(k): v for k, v in sorted(reused_from.items())},
                "repeats_within": repeats_within,
            }
        )
        total_reused += len(reused)
        if reused:
            sources = "; ".join(
                f"{len(v)} from point {k} ({int_ranges(v)})" for k, v in sorted(reused_from.items())
            )
            warnings.append(
                f"point {index} (number={number}, offset={point_offset}) reuses {len(reused)} of "
                f"its {len(unique)} conversations: {sources}"
            )
        if repeats_within:
            warnings.append(
                f"point {index} (number={number}) needs more conversations than the dataset has "
                f"({num_conversations}); EvalScope cycles, replaying {repeats_within} again"
            )
        for conv in unique:
            first_user.setdefault(conv, index)
    need = fresh_size(offset, numbers)
    if warnings:
        warnings.append(
            f"a dataset of {need} conversations gives every point fresh conversations "
            f"(repro dataset build --fresh-for-sweep)"
        )
    return {
        "num_conversations": num_conversations,
        "offset": offset,
        "numbers": list(numbers),
        "fresh_size": need,
        "points": points,
        "total_reused": total_reused,
        "warnings": warnings,
    }
