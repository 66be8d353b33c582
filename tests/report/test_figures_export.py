"""Static export: valid PNG and SVG through kaleido and the system Chromium; clear errors."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner
from PIL import Image, ImageStat
from support.crafted_runs import published_points, write_run

from harness.cli import cli
from harness.report.images import (
    EXPORT_HEIGHT,
    EXPORT_WIDTH,
    PNG_SCALE,
    ExportError,
    find_browser,
    write_run_figures,
)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_run(tmp_path_factory.mktemp("export") / "run", "export-run", published_points(0))


def test_png_and_svg_export(run_dir: Path, tmp_path: Path) -> None:
    if not any(shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")):
        pytest.fail(
            "static export needs Chromium: apt-get install -y chromium (bootstrap.sh "
            "does this as root)"
        )
    runner = CliRunner()
    png, svg = tmp_path / "fig.png", tmp_path / "fig.svg"
    result = runner.invoke(cli, ["figure", str(run_dir), "--out", str(png)])
    assert result.exit_code == 0, result.output
    image = Image.open(png)
    image.verify()  # a complete, valid PNG
    image = Image.open(png).convert("L")
    assert image.size == (EXPORT_WIDTH * PNG_SCALE, EXPORT_HEIGHT * PNG_SCALE)
    assert ImageStat.Stat(image).stddev[0] > 10  # not blank
    result = runner.invoke(cli, ["figure", str(run_dir), "--out", str(svg)])
    assert result.exit_code == 0, result.output
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    text = " ".join(root.itertext())
    assert "c32" in text and "published · HiSparse" in text and "Mean requests running" in text
    assert "Interactivity: tokens/s/user" in text


def test_html_figure_needs_no_browser(run_dir: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no chromium reachable
    out = tmp_path / "fig.html"
    result = CliRunner().invoke(cli, ["figure", str(run_dir), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "Plotly.newPlot" in out.read_text(encoding="utf-8")


def test_missing_browser_names_the_fix(run_dir: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("BROWSER_PATH", raising=False)
    with pytest.raises(ExportError, match="apt-get install -y chromium"):
        find_browser()
    result = CliRunner().invoke(cli, ["figure", str(run_dir), "--out", str(tmp_path / "f.png")])
    assert result.exit_code != 0
    assert "apt-get install -y chromium" in str(result.exception)
    assert not (tmp_path / "f.png").exists()
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "nothing-here"))
    with pytest.raises(ExportError, match="BROWSER_PATH=.*not an executable"):
        find_browser()


def test_unknown_format_is_rejected(run_dir: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["figure", str(run_dir), "--out", str(tmp_path / "f.jpg")])
    assert result.exit_code != 0
    assert "unknown figure format '.jpg'" in str(result.exception)


def test_run_figures_in_every_format(run_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    written, skipped = write_run_figures(run)
    assert skipped is None
    names = sorted(p.name for p in written)
    assert names == sorted(
        f"{stem}.{fmt}"
        for stem in ("pareto", "pareto-bench-sweep")
        for fmt in ("html", "png", "svg")
    )
    assert sorted(p.name for p in (run / "figures").iterdir()) == names  # no temp files left
    for stem in ("pareto", "pareto-bench-sweep"):
        image = Image.open(run / "figures" / f"{stem}.png").convert("L")
        assert image.size == (EXPORT_WIDTH * PNG_SCALE, EXPORT_HEIGHT * PNG_SCALE)
        assert ImageStat.Stat(image).stddev[0] > 10
    svg = (run / "figures" / "pareto-bench-sweep.svg").read_text(encoding="utf-8")
    assert "Output tokens/s per user" in svg and "vLLM bench sweep definition" in svg


def test_run_figures_without_a_browser_keep_the_html(
    run_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("BROWSER_PATH", raising=False)
    written, skipped = write_run_figures(run)
    assert sorted(p.name for p in written) == ["pareto-bench-sweep.html", "pareto.html"]
    assert skipped is not None and "apt-get install -y chromium" in skipped
    assert sorted(p.name for p in (run / "figures").iterdir()) == sorted(p.name for p in written)
