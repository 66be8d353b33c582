"""kaleido returns without raising when a render fails (it deletes the file and keeps the error):
the export renders the figures that left no file again, and names the ones that never came.
The renderer is replaced here (no browser); the real one runs in test_figures_export.py."""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
import pytest

from harness.report import images


def _fig() -> go.Figure:
    return go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))


@pytest.fixture
def renderer(monkeypatch):
    """A renderer that skips the files listed in `drop` (one entry per dropped render)."""
    calls: list[list[str]] = []
    drop: list[str] = []

    def write_images(figs, paths, **_kwargs):
        calls.append([Path(p).name for p in paths])
        for path in paths:
            if Path(path).name in drop:
                drop.remove(Path(path).name)
                continue  # what kaleido leaves behind when a render fails
            Path(path).write_bytes(b"\x89PNG fake")

    monkeypatch.setattr(images, "find_browser", lambda: "/usr/bin/chromium")
    monkeypatch.setattr(images.pio, "write_images", write_images)
    return calls, drop


def test_a_dropped_render_is_done_again(renderer, tmp_path: Path) -> None:
    calls, drop = renderer
    drop.append(".b.png.tmp.png")
    written = images.export_figures([(_fig(), tmp_path / "a.png"), (_fig(), tmp_path / "b.png")])
    assert [p.name for p in written] == ["a.png", "b.png"]
    assert (tmp_path / "b.png").read_bytes() == b"\x89PNG fake"
    assert calls == [[".a.png.tmp.png", ".b.png.tmp.png"], [".b.png.tmp.png"]]  # only b again
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png", "b.png"]  # no temporaries


def test_a_render_that_never_comes_is_an_error_naming_the_file(renderer, tmp_path: Path) -> None:
    calls, drop = renderer
    drop.extend([".b.svg.tmp.svg"] * images.EXPORT_ATTEMPTS)
    (tmp_path / "b.svg").write_text("old")
    with pytest.raises(images.ExportError, match=r"b\.svg: Chromium .* rendered no image in 3"):
        images.export_figures([(_fig(), tmp_path / "a.png"), (_fig(), tmp_path / "b.svg")])
    assert len(calls) == images.EXPORT_ATTEMPTS
    assert (tmp_path / "b.svg").read_text() == "old"  # nothing replaced when the export failed
    assert not (tmp_path / "a.png").exists()  # all or nothing
