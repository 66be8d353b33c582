"""The report's content: sections, ratio columns, time series, provenance, published values."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from plotly.offline import get_plotlyjs
from support.browser import _figures
from support.crafted_runs import published_points, write_run

from harness.cli import cli
from harness.client.scrape import Sample, read_samples_csv
from harness.report.dashboard import write_report
from harness.report.timeseries import (
    SCRAPED_NAMES,
    _acceptance,
    _counter,
    _gauge,
    read_scraped,
)
from harness.results import RunLayout, load_run, point_id


def _pair(root: Path) -> tuple[Path, Path]:
    a = write_run(root / "a", "base-run", published_points(0))
    points = published_points(1)
    points[1].update(valid=False, invalid_reasons=["EvalScope reported 3 failed requests"])
    b = write_run(
        root / "b",
        "cand-run",
        points,
        profile_name="offload512",
        build={"commit": "80cb71c9ff1234"},
        spec=False,
    )
    return a, b


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    return _pair(tmp_path)


@pytest.fixture(scope="module")
def pair_html(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The report of the crafted pair (A baseline), rendered once for the read-only tests."""
    root = tmp_path_factory.mktemp("pair")
    return write_report(list(_pair(root)), out=root / "r.html").read_text(encoding="utf-8")


def test_report_sections_and_single_inline_plotlyjs(pair_html: str) -> None:
    html = pair_html
    for anchor in ("figures", "metrics", "timeseries", "provenance", "published"):
        assert f'id="{anchor}"' in html
    assert html.count(get_plotlyjs()[:2000]) == 1  # plotly.js embedded once
    page = html.replace(get_plotlyjs(), "")  # plotly.js mentions URLs in strings; never loads them
    assert not re.search(r'(src|href)\s*=\s*["\']?(https?:)?//', page)  # nothing external
    assert "<link" not in page and "@import" not in page
    figures = _figures(html)
    assert {"figure-0", "figure-1"} <= set(figures)
    assert len([k for k in figures if k.startswith("timeseries-")]) == 5
    published = [t for t in figures["figure-0"]["data"] if t["meta"]["published"]]
    assert published and all(t["name"].startswith("published · ") for t in published)


def test_ratio_columns_against_baseline_with_verdicts(pair_html: str) -> None:
    html = pair_html
    assert "<th>÷ base-run (hisparse384)</th>" in html
    # c8: occupancy 4.8 vs 7.1 -> 0.676x worse; interactivity 47.2 vs 31.8 -> 1.484x better.
    assert '<td class="worse">0.676×</td>' in html
    assert '<td class="better">1.484×</td>' in html
    # c1 throughput 4809 vs 4892 is within 2%: same.
    assert '<td class="same">0.983×</td>' in html
    # whole-curve block: most requests running 4.9 (c8 invalid excluded) vs 18.9
    assert "Whole curve (valid points" in html
    assert '<td class="worse">0.259×</td>' in html


def test_explicit_baseline_goes_first(pair, tmp_path: Path) -> None:
    a, b = pair
    html = write_report([a, b], baseline=b, out=tmp_path / "r.html").read_text(encoding="utf-8")
    assert "<th>÷ cand-run (offload512)</th>" in html
    assert '<td class="better">1.479×</td>' in html  # c8 occupancy 7.1 / 4.8


def test_invalid_points_flagged_with_reasons(pair_html: str) -> None:
    html = pair_html
    assert 'id="invalid-points"' in html
    text = " ".join(html.split())
    assert "cand-run (offload512) · c8: EvalScope reported 3 failed requests" in text
    assert "c8 invalid:" in html


def test_capacity_figures_embedded_or_explained(pair_html: str, tmp_path: Path) -> None:
    figures = _figures(pair_html)
    capacity = [
        fig
        for fig in figures.values()
        if "Concurrency vs. sequence length" in str(fig["layout"].get("title"))
    ]
    assert len(capacity) == 2  # one per run (GLM-5.3 has a capacity model)
    tiny = write_run(tmp_path / "tiny", "tiny-run", published_points(0), gpus=0)
    manifest = json.loads((tiny / "manifest.json").read_text())
    manifest["profile"]["model"] = "tiny:tiny-llama"
    (tiny / "manifest.json").write_text(json.dumps(manifest))
    html = write_report([tiny], out=tmp_path / "t.html").read_text(encoding="utf-8")
    assert "tiny-run (hisparse384): no capacity figure" in " ".join(html.split())


def test_provenance_panel(pair_html: str) -> None:
    html = pair_html
    assert "vllm serve zai-org/GLM-5.3 --tensor-parallel-size 8" in html
    assert "sha256 " + "ab" * 32 in html
    assert "evalscope 1.7.0" in html
    assert "sweep.max_tokens=220" in html
    assert "80cb71c9ff1234" in html and "NVIDIA H200" in html


def test_published_table_lists_blog_values(pair_html: str) -> None:
    html = pair_html
    section = html[html.index('id="published"') :]
    for value in ("257", "11,682", "18.9", "4.9", "e8ef1e07bd", "80cb71c9ff", "±0.5%"):
        assert value in section


def test_timeseries_traces_match_samples(pair, tmp_path: Path) -> None:
    a, b = pair
    html = write_report([a, b], out=tmp_path / "r.html").read_text(encoding="utf-8")
    c8 = _figures(html)["timeseries-1"]
    running = [t for t in c8["data"] if t["meta"]["metric"] == "vllm:num_requests_running"]
    assert [t["meta"]["series"] for t in running] == [
        "base-run (hisparse384)",
        "cand-run (offload512)",
    ]
    # two engines of parallel/2 each summed back: ramps 1..8 then stays at 8
    assert running[0]["y"][:9] == [1, 2, 3, 4, 5, 6, 7, 8, 8]
    assert running[0]["x"][0] == 0.0
    acceptance = [t for t in c8["data"] if t["meta"]["metric"] == "acceptance"]
    assert len(acceptance) == 1  # cand-run has no spec-decode counters
    assert acceptance[0]["y"][:4] == pytest.approx([1.6, 1.7, 1.8, 1.9])
    preempt = [t for t in c8["data"] if t["meta"]["metric"] == "vllm:num_preemptions_total"]
    assert preempt[0]["y"][-1] == 2 * 2  # twice per engine in 20 s, two engines


def test_counter_resets_and_engine_folding() -> None:
    def s(t, name, engine, value):
        return Sample(t, t, name, {"engine": engine}, value)

    samples = [
        s(0, "vllm:num_preemptions_total", "0", 5),
        s(1, "vllm:num_preemptions_total", "0", 7),
        s(2, "vllm:num_preemptions_total", "0", 1),  # restart: 1 new
        s(0, "vllm:num_preemptions_total", "1", 0),
        s(2, "vllm:num_preemptions_total", "1", 3),
    ]
    assert _counter(samples, "vllm:num_preemptions_total") == ([0, 1, 2], [0.0, 2.0, 6.0])
    kv = [s(0, "vllm:kv_cache_usage_perc", "0", 0.2), s(0, "vllm:kv_cache_usage_perc", "1", 0.7)]
    assert _gauge(kv, "vllm:kv_cache_usage_perc", "max") == ([0], [0.7])
    assert _gauge(kv, "vllm:kv_cache_usage_perc", "sum")[1] == pytest.approx([0.9])
    spec = [
        s(0, "vllm:spec_decode_num_drafts_total", "0", 0),
        s(0, "vllm:spec_decode_num_accepted_tokens_total", "0", 0),
        s(1, "vllm:spec_decode_num_drafts_total", "0", 0),
        s(1, "vllm:spec_decode_num_accepted_tokens_total", "0", 0),
        s(2, "vllm:spec_decode_num_drafts_total", "0", 4),
        s(2, "vllm:spec_decode_num_accepted_tokens_total", "0", 3),
    ]
    assert _acceptance(spec) == ([2], [1.75])  # the idle interval (no drafts) is skipped


def test_filtered_reader_matches_the_scrape_reader(pair) -> None:
    path = RunLayout(load_run(pair[0]).root).samples_csv(point_id(8, 16))
    everything = read_samples_csv(path)
    assert {x.labels["engine"] for x in everything} == {"0", "1"}
    assert read_scraped(path) == [x for x in everything if x.name in SCRAPED_NAMES]
    assert len(read_scraped(path)) == len(everything) > 0


def test_default_output_in_dashboards_dir(pair, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("REPRO_DASHBOARDS", str(tmp_path / "dash"))
    path = write_report([pair[0]])
    assert path == tmp_path / "dash" / "base-run.html"
    html = path.read_text(encoding="utf-8")
    assert "<th>÷" not in html  # one run: no ratio columns
    assert oct(path.stat().st_mode & 0o777) == "0o644"


def test_cli_report_by_run_id(pair, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("REPRO_RESULTS", str(tmp_path))
    monkeypatch.setenv("REPRO_DASHBOARDS", str(tmp_path / "dash"))
    result = CliRunner().invoke(cli, ["report", "a", "b", "--title", "PR 123"])
    assert result.exit_code == 0, result.output
    path = Path(result.output.strip())
    assert path == tmp_path / "dash" / "base-run-vs-cand-run.html"
    assert "<title>PR 123</title>" in path.read_text(encoding="utf-8")
    bad = CliRunner().invoke(cli, ["report", "a", "--out", str(tmp_path / "x.pdf")])
    assert bad.exit_code != 0 and "give --out a .html file name" in str(bad.exception)


def test_invalid_repeat_is_named_in_the_banner(tmp_path: Path) -> None:
    pts = [
        {
            "parallel": 1,
            "number": 2,
            "repeat": r,
            "interactivity": 10.0 + r,
            "throughput_per_gpu": 100.0,
            "occupancy": 1.0,
        }
        for r in range(3)
    ]
    pts[1].update(valid=False, invalid_reasons=["2 requests failed"])
    run = write_run(tmp_path / "r", "rep", pts)
    html = " ".join(write_report([run], out=tmp_path / "r.html").read_text().split())
    assert (
        "rep (hisparse384) · c1: left out of the median (other repeats valid): "
        "p001-n0002-r1: 2 requests failed"
    ) in html
    assert "2 repeats" in html


def test_workload_mismatch_is_warned(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", "a", published_points(0), workload_key="k1")
    b = write_run(tmp_path / "b", "b", published_points(0), workload_key="k2")
    html = write_report([a, b], out=tmp_path / "r.html").read_text(encoding="utf-8")
    assert "replayed different workloads" not in html  # only the configuration key differs
    c = write_run(tmp_path / "c", "c", published_points(0), gpus=4)  # another per-GPU divisor
    html = write_report([a, c], out=tmp_path / "r2.html").read_text(encoding="utf-8")
    assert "replayed different workloads" in html
