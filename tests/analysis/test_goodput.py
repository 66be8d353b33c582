"""Objectives parsing, percentiles and goodput on crafted per-request tables (hand-checked)."""

from __future__ import annotations

import pytest

from harness.analysis.goodput import (
    max_concurrency_meeting,
    meets,
    percentile,
    table_metrics,
)
from harness.analysis.request_table import RequestRow, build_table
from harness.analysis.slo import Objectives, parse_slo
from harness.errors import ConfigError


def test_parse_slo_units_and_canonical_text():
    o = parse_slo("ttft=2s, tpot=50ms")
    assert o == Objectives(ttft=2.0, tpot=0.05)
    assert o.text() == "ttft=2s,tpot=50ms"
    assert parse_slo(o.text()) == o
    assert parse_slo("e2e=1.5s,itl=200ms").given == {"itl": 0.2, "e2e": 1.5}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ttft=2", "ttft='2': a positive number with a unit s or ms"),
        ("ttfb=2s", "'ttfb': unknown objective (known: ttft, tpot, itl, e2e)"),
        ("ttft", "'ttft': expected KEY=VALUE"),
        ("ttft=2s,ttft=3s", "'ttft' given twice"),
        ("ttft=0ms", "must be greater than 0"),
        ("tpot=-5ms", "a positive number with a unit"),
        ("", "empty objectives"),
    ],
)
def test_parse_slo_errors_name_the_part(text, message):
    with pytest.raises(ConfigError) as info:
        parse_slo(text, source="--slo")
    assert str(info.value).startswith("--slo: ")
    assert message in str(info.value)


def test_percentile_is_evalscopes_floor_index():
    values = [float(v) for v in range(1, 11)]  # 1..10
    assert percentile(values, 50) == 6.0  # int(10 * 0.5) = 5 -> the 6th
    assert percentile(values, 90) == 10.0
    assert percentile(values, 99) == 10.0
    assert percentile([], 50) is None


def _row(conv, turn, start, ttft, latency, out=11, ok=True, itl=None):
    return RequestRow(
        conversation=conv,
        turn=turn,
        start=start,
        end=start + latency if ok else None,
        ttft=ttft if ok else None,
        output_tokens=out if ok else None,
        prompt_tokens=100 * turn,
        success=ok,
        itl=itl if itl is not None else [(latency - ttft) / (out - 1)] * (out - 1),
    )


def _table():
    # 4 requests over 10 s; TPOT = (latency - ttft) / 10
    return build_table(
        [
            _row(0, 1, 100.0, ttft=1.0, latency=1.4),  # tpot 40 ms: meets
            _row(0, 2, 102.0, ttft=3.0, latency=3.4),  # ttft 3 s: misses ttft
            _row(1, 1, 100.5, ttft=0.5, latency=1.5),  # tpot 100 ms: misses tpot
            _row(1, 2, 108.0, ttft=0.2, latency=2.0, ok=False),  # failed: never meets
            _row(2, 1, 105.0, ttft=1.9, latency=5.0, out=1, itl=[]),  # 1 token: no TPOT
        ]
    )


def test_goodput_counts_requests_meeting_every_objective():
    table = _table()
    objectives = parse_slo("ttft=2s,tpot=50ms")
    by_key = dict(
        zip(
            zip(table["conversation"], table["turn"], strict=True),
            meets(table, objectives),
            strict=True,
        )
    )
    assert by_key == {(0, 1): True, (0, 2): False, (1, 1): False, (1, 2): False, (2, 1): True}
    metrics = table_metrics(table, objectives)
    # duration: first start 100.0 .. last end 110.0 (conv 2: 105 + 5) = 10 s; the failed
    # request has no end
    assert metrics["goodput_rps"] == pytest.approx(2 / 10.0)
    assert metrics["slo_attainment"] == pytest.approx(2 / 5)


def test_table_percentiles_over_successful_requests():
    metrics = table_metrics(_table(), None)
    assert "goodput_rps" not in metrics
    # successful TTFTs: 1.0, 3.0, 0.5, 1.9 -> sorted 0.5, 1.0, 1.9, 3.0; p50 = index 2
    assert metrics["p50_ttft_ms"] == pytest.approx(1900.0)
    assert metrics["p99_ttft_ms"] == pytest.approx(3000.0)
    # TPOTs 40, 40, 100 ms (the one-token request has none)
    assert metrics["p50_tpot_ms"] == pytest.approx(40.0)
    assert metrics["p90_tpot_ms"] == pytest.approx(100.0)
    assert metrics["p50_e2e_s"] == pytest.approx(3.4)  # 1.4, 1.5, 3.4, 5.0
    assert metrics["p99_itl_ms"] == pytest.approx(100.0)


def test_itl_objective_uses_the_worst_gap():
    table = build_table([_row(0, 1, 0.0, 0.1, 1.1, itl=[0.05] * 9 + [0.5])])
    assert not meets(table, parse_slo("itl=200ms")).iloc[0]
    assert meets(table, parse_slo("itl=600ms")).iloc[0]


class _P:
    def __init__(self, parallel, attainment, valid=True):
        self.parallel, self.valid = parallel, valid
        self.metrics = {"slo_attainment": attainment}


def test_highest_concurrency_meeting_objectives_for_90_percent():
    points = [_P(1, 1.0), _P(8, 0.95), _P(16, 0.89), _P(24, 0.91, valid=False), _P(32, None)]
    assert max_concurrency_meeting(points) == 8
    assert max_concurrency_meeting(points, threshold=0.8) == 16
    assert max_concurrency_meeting([_P(4, 0.5)]) is None


def test_sweep_slo_field_is_validated_and_canonical():
    from harness.serve.profiles import SweepSpec

    workload = {"points": [(1, 1)], "dataset_offset": 0, "max_tokens": 1}
    assert SweepSpec(**workload, slo="tpot=50ms,ttft=2000ms").slo == "ttft=2s,tpot=50ms"
    with pytest.raises(ValueError, match="unknown objective"):
        SweepSpec(**workload, slo="latency=2s")
