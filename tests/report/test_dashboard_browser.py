"""The report opens in the system's headless Chromium: no console errors, no network requests,
a non-blank screenshot, and hostile run names stay inert text.

Chromium is driven over the DevTools protocol on a pipe (--remote-debugging-pipe: JSON messages
ending in NUL on fds 3/4), so no extra client library is needed. Any DNS lookup is made to fail
(--host-resolver-rules) and every request the page makes is recorded.
CI must install Debian's chromium (`apt-get install -y chromium`).
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from PIL import Image, ImageStat
from support.browser import _problems, open_in_chromium, require_chromium
from support.crafted_runs import published_points, write_run

from harness.report.dashboard import write_report


@pytest.fixture(scope="module")
def hostile_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    require_chromium()
    root = tmp_path_factory.mktemp("browser")
    a = write_run(root / "a", "hisparse-run", published_points(0))
    points = published_points(1)
    points[2].update(valid=False, invalid_reasons=["<b>2</b> requests failed"])
    b = write_run(
        root / "b", "<script>alert(1)</script>", points, profile_name="<img src=x onerror=alert(2)>"
    )
    html = write_report([a, b], out=root / "report.html", title="<script>alert(3)</script>")
    outcome = open_in_chromium(html, root / "chromium-profile")
    outcome["html"] = html.read_text(encoding="utf-8")
    outcome["uri"] = html.resolve().as_uri()
    return outcome


def test_report_renders_offline_without_console_errors(hostile_report: dict[str, Any]) -> None:
    problems = _problems(hostile_report["events"])
    assert problems["errors"] == []
    # Only the file itself: plotly.js is inline, nothing is fetched from anywhere.
    assert {url.split(":", 1)[0] for url in problems["requests"]} <= {"file", "data", "blob"}
    assert [u for u in problems["requests"] if u.startswith("file:")] == [hostile_report["uri"]]
    # Every figure block was drawn: two Pareto figures, the capacity figures of both runs and
    # one /metrics figure per configured point (5).
    blocks = hostile_report["html"].count('<script type="application/json"')
    assert hostile_report["facts"]["plots"] == blocks >= 2 + 5 + 2


def test_screenshot_is_not_blank(hostile_report: dict[str, Any]) -> None:
    image = Image.open(io.BytesIO(hostile_report["screenshot"])).convert("L")
    assert image.size == (1280, 1600)
    stats = ImageStat.Stat(image)
    assert stats.stddev[0] > 10.0  # a blank page has ~0; figures and tables give tens
    colours = Image.open(io.BytesIO(hostile_report["screenshot"])).convert("RGB").getcolors(1 << 20)
    assert colours is not None and len(colours) > 50  # anti-aliased plots, not a flat page


def test_hostile_names_are_escaped_and_inert(hostile_report: dict[str, Any]) -> None:
    problems = _problems(hostile_report["events"])
    assert problems["dialogs"] == []
    facts = hostile_report["facts"]
    assert facts["title"] == "<script>alert(3)</script>"  # shown as text
    assert facts["injected"] == 0  # the <img onerror> profile name did not become an element
    assert "<script>alert(1)</script>" in facts["body"]  # visible, as literal text
    assert "<img src=x onerror=alert(2)>" in facts["body"]
    html = hostile_report["html"]
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<img src=x" not in html
    # The only scripts are plotly.js, the figure data blocks and the drawing code.
    assert set(facts["scripts"]) == {"js", "application/json"}
    assert facts["scripts"].count("js") == 2
