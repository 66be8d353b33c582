"""Rotation/reuse arithmetic against the pinned EvalScope's own code (loader, driver, strategy)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from harness.dataset.rotation import (
    conversations_for_points,
    fresh_size,
    point_offsets,
    reuse_report,
)

BLOG_NUMBERS = [4, 16, 32, 48, 64]


def _marker_dataset(path: Path, count: int) -> Path:
    conversations = [
        [{"messages": [{"role": "user", "content": f"conv-{i}"}], "prompt_tokens": 1}]
        for i in range(count)
    ]
    path.write_text(json.dumps({"metadata": {}, "conversations": conversations}))
    return path


def _evalscope_replays(tmp_path: Path, monkeypatch, count: int, offset: int, numbers: list[int]):
    """Run EvalScope's real multi-point driver with the network parts stubbed out, recording the
    conversations its real MultiTurnStrategy hands to workers at each point."""
    import evalscope.perf.main as perf_main
    import evalscope.perf.multi_turn_benchmark as mtb
    from evalscope.perf.arguments import Arguments

    recorded: list[list[int]] = []

    class RecordingStrategy(mtb.MultiTurnStrategy):
        async def run(self) -> None:
            claimed = [self._next_conversation() for _ in range(self.args.number)]
            recorded.append([int(conv[0][0]["content"].split("-")[1]) for conv in claimed])

    async def no_connect_test(*_args, **_kwargs):
        return None

    async def no_metrics(*_args, **_kwargs):
        return [], None

    monkeypatch.setattr(mtb, "MultiTurnStrategy", RecordingStrategy)
    monkeypatch.setattr(mtb, "connect_test", no_connect_test)
    monkeypatch.setattr(mtb, "statistic_benchmark_metric", no_metrics)
    monkeypatch.setattr(mtb, "summary_result", lambda *_a, **_k: ({}, {}))
    monkeypatch.setattr(perf_main, "print_summary", lambda *_a, **_k: None)
    # EvalScope leaves its event loop (with SIGINT/SIGTERM handlers) open; close it here, in the
    # main thread, rather than let a later garbage collection in another thread trip over it.
    loops = []
    new_event_loop = asyncio.new_event_loop

    def recorded_loop() -> asyncio.AbstractEventLoop:
        loops.append(new_event_loop())
        return loops[-1]

    monkeypatch.setattr(asyncio, "new_event_loop", recorded_loop)

    dataset = _marker_dataset(tmp_path / "markers.json", count)
    args = Arguments(
        model="m",
        url="http://127.0.0.1:9/v1/chat/completions",
        api="openai",
        dataset="swe_smith",
        dataset_path=str(dataset),
        dataset_offset=offset,
        multi_turn=True,
        number=list(numbers),
        parallel=[1] * len(numbers),
        sleep_interval=0,
        outputs_dir=str(tmp_path / "out"),
    )
    try:
        perf_main.run_multi_benchmark(args, output_path=str(tmp_path / "out"))
    finally:
        for loop in loops:
            loop.close()
    return recorded


@pytest.mark.parametrize(
    ("count", "offset", "numbers"),
    [
        (128, 52, BLOG_NUMBERS),  # the blog sweep: c32 at offset 152 >= 128, no rotation
        (5, 3, [2, 2]),  # docs/evalscope.md's observed example: 3, 4 then 0, 1
        (10, 0, [4, 8, 8]),  # offset 12 >= 10: back to conversation 0
        (5, 3, [2, 7]),  # number > conversations: the strategy cycles 0-4, 0, 1
        (164, 52, BLOG_NUMBERS),  # the fresh size
    ],
)
def test_rotation_matches_evalscope(tmp_path, monkeypatch, count, offset, numbers):
    ours = conversations_for_points(count, offset, numbers)
    theirs = _evalscope_replays(tmp_path, monkeypatch, count, offset, numbers)
    assert ours == theirs


def test_blog_sweep_reuse_arithmetic():
    assert point_offsets(52, BLOG_NUMBERS) == [52, 56, 72, 104, 152]
    report = reuse_report(128, 52, BLOG_NUMBERS)
    points = report["points"]
    assert points[3]["conversations"] == list(range(104, 128)) + list(range(24))
    assert points[4]["conversations"] == list(range(64))
    assert points[4]["rotated"] is False
    assert len(points[4]["reused"]) == 36
    assert points[4]["reused_from"] == {
        "0": [52, 53, 54, 55],
        "1": list(range(56, 64)),
        "3": list(range(24)),
    }
    assert report["total_reused"] == 36
    assert any("reuses 36" in w for w in report["warnings"])


def test_fresh_size_is_minimal():
    size = fresh_size(52, BLOG_NUMBERS)
    assert size == 164
    assert reuse_report(size, 52, BLOG_NUMBERS)["total_reused"] == 0
    assert reuse_report(size - 1, 52, BLOG_NUMBERS)["total_reused"] > 0
    assert fresh_size(2, [2, 8, 16]) == 26
    assert reuse_report(26, 2, [2, 8, 16])["warnings"] == []
