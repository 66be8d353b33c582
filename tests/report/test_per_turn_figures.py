"""Per-turn report figures and the goodput claims hook, on small simulated runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.analysis.request_table import read_table
from harness.gate.claims import ClaimsFile, check_claims
from harness.report.dashboard import render_report
from harness.report.per_turn import by_turn, per_turn_figures
from harness.results import load_run
from harness.sim.run import run_simulation

SETS = [
    "sweep.points=[[1,2],[4,8]]",
    "sweep.dataset_offset=3",
    "sweep.scrape_interval_s=2",
    "sweep.think_time={kind: fixed, seconds: 2}",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("perturn")
    recipe = root / "small.yaml"
    recipe.write_text(
        "number: 10\nnum_turns: 3\nfirst_turn_length: 30000\nsubsequent_turn_length: 500\n"
    )
    return [
        run_simulation(
            arm,
            dataset=str(recipe),
            overrides=[*SETS, f"sweep.slo=ttft={ttft}"],
            out=root,
            run_id=arm,
        )
        for arm, ttft in (("hisparse384", "60s"), ("offload512", "1ms"))
    ]


def test_by_turn_rows_are_medians_and_hit_shares(runs):
    table = read_table(runs[0] / "points" / "p004-n0008-r0" / "requests.parquet")
    rows = by_turn(table)
    assert rows.index.tolist() == [1, 2, 3]
    assert rows.loc[2, "ttft_ms"] == pytest.approx(table[table.turn == 2].ttft_s.median() * 1000)
    assert rows.loc[1, "hit"] == 0.0
    t3 = table[table.turn == 3]
    assert t3.server_cached_tokens.notna().all()  # the offline engine states its own hits
    server_hit = t3.server_cached_tokens.sum() / t3.prompt_tokens.sum()
    assert rows.loc[3, "hit"] == pytest.approx(server_hit)
    assert server_hit < t3.cached_tokens.sum() / t3.prompt_tokens.sum()  # whole blocks only
    assert rows.loc[3, "requests"] == 8


def test_report_has_per_turn_figures_for_each_arm_and_point(runs):
    loaded = [load_run(r) for r in runs]
    figs = {fid: fig for fid, _, fig in per_turn_figures(loaded)}
    assert set(figs) == {"ttft-turn", "hit-turn", "ttft-cdf", "transfer"}
    names = [t.name for t in figs["ttft-turn"].data]
    assert names == ["hisparse384 · c1", "hisparse384 · c4", "offload512 · c1", "offload512 · c4"]
    cdf = figs["ttft-cdf"].data[1]
    assert len(cdf.x) == 24 and cdf.y[-1] == 1.0 and list(cdf.x) == sorted(cdf.x)
    transfer = {t.name for t in figs["transfer"].data}
    assert "HiSparse host→device" in transfer and "offload loads (CPU→GPU)" in transfer
    html = render_report(loaded)
    assert "TTFT by turn index" in html and "TTFT CDF" in html
    assert 'id="per-turn-ttft-turn"' in html and 'id="per-turn-ttft-cdf-data"' in html


def test_claims_gate_on_goodput_and_highest_concurrency_meeting_objectives(runs):
    by_arm = {r.name: load_run(r) for r in runs}
    hisparse = by_arm["hisparse384"]
    assert all(p.metrics["slo_attainment"] == 1.0 for p in hisparse.points)  # ttft <= 60 s
    assert all(p.metrics["slo_attainment"] == 0.0 for p in by_arm["offload512"].points)
    claims = ClaimsFile.model_validate(
        {
            "arms": {"h": {"profiles": ["hisparse384"]}, "o": {"profiles": ["offload512"]}},
            "claims": [
                {"id": "h-meets-c4", "left": {"arm": "h", "point": "slo", "field": "parallel"},
                 "op": ">=", "value": 4},
                {"id": "o-meets-c1", "left": {"arm": "o", "point": "slo", "field": "parallel"},
                 "op": ">=", "value": 1},
                {"id": "h-goodput", "left": {"arm": "h", "point": "c4", "metric": "goodput_rps"},
                 "op": ">", "right": {"arm": "o", "point": "c4", "metric": "goodput_rps"}},
            ],
        }
    )  # fmt: skip
    results = {r.id: r for r in check_claims(claims, {"h": hisparse, "o": by_arm["offload512"]})}
    assert results["h-meets-c4"].status == "holds" and results["h-meets-c4"].left == 4
    assert results["o-meets-c1"].status == "fails"
    assert "no such point" in results["o-meets-c1"].detail
    assert results["h-goodput"].status == "holds"
    assert results["h-goodput"].right == 0.0


def test_claims_check_slo_recomputes_goodput_from_the_tables(runs, tmp_path):
    from click.testing import CliRunner

    from harness.cli import cli

    claims = tmp_path / "c.yaml"
    claims.write_text(
        "arms:\n  o: {profiles: [offload512]}\nclaims:\n"
        "  - id: o-meets-c4\n    left: {arm: o, point: slo, field: parallel}\n"
        "    op: '>='\n    value: 4\n"
    )
    base = ["claims", "check", str(runs[1]), "--claims", str(claims)]
    recorded = CliRunner().invoke(cli, base)  # recorded under ttft=1ms: nothing meets it
    assert recorded.exit_code == 1, recorded.output
    loose = CliRunner().invoke(cli, [*base, "--slo", "ttft=60s"])
    assert loose.exit_code == 0, loose.output
    assert "goodput under ttft=60s from 2 per-request tables" in loose.output
    bad = CliRunner().invoke(cli, [*base, "--slo", "ttft=60"])
    assert bad.exit_code != 0 and "--slo: ttft='60'" in str(bad.exception or bad.output)
