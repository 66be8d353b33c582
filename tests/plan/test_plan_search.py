"""`repro plan`'s search on small grids of a tiny workload (2 turns, 2,000-token context):
ranking, the exact sharing of max-num-seqs >= c, the c1-probe pruning rule against an unpruned
search, and the cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.plan import evaluate as evaluate_module
from harness.plan.arms import Config
from harness.plan.explain import explain
from harness.plan.inputs import PlanRequest, TrafficShape
from harness.plan.rank import ranked
from harness.plan.resolve import build_request
from harness.plan.search import Entry, SearchResult, qualifies, search

TINY = TrafficShape(turns=2, context=2000)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPRO_CACHE", str(tmp_path / "cache"))


def _request(**given: object) -> PlanRequest:
    options: dict = {
        "traffic": TINY,
        "slo": "tpot=6ms",
        "arms": "hisparse",
        "pools": "128",
        "max_num_seqs": "2,256",
        "concurrency": "1,2,4",
    }
    options.update(given)
    return build_request(**options)


def _metric(entry: Entry, name: str) -> float:
    assert entry.outcome is not None
    value = entry.outcome.metrics[name]
    assert value is not None, (entry.config, name)
    return value


def _outcomes(result: SearchResult) -> dict[Config, dict]:
    return {e.config: e.outcome.to_json() for e in result.entries if e.outcome is not None}


def test_ranking_picks_the_best_configuration_that_meets_the_objectives() -> None:
    request = _request()
    result = search(request, jobs=1)
    order = ranked(result)
    meeting = {
        e.config: _metric(e, "goodput_rps")
        for e in result.entries
        if _metric(e, "slo_attainment") >= 0.9
    }
    assert order[0].config == max(meeting, key=lambda c: (meeting[c], -c.max_num_seqs))
    # c4 without a cap runs more requests per second but misses TPOT 6 ms: not ranked
    uncapped = next(e for e in result.entries if e.config == Config("hisparse", 128, 256, 4))
    assert _metric(uncapped, "request_throughput") > _metric(order[0], "request_throughput")
    assert not qualifies(uncapped.outcome, request)
    assert uncapped.config not in [e.config for e in order]
    goodputs = [_metric(e, "goodput_rps") for e in order]
    assert goodputs == sorted(goodputs, reverse=True)


def test_max_num_seqs_at_or_above_every_concurrency_shares_one_identical_sweep() -> None:
    request = _request(max_num_seqs="4,256", concurrency="1,2,4")
    result = search(request, jobs=1)
    assert result.counts["servers"] == 1
    assert {e.source for e in result.entries if e.config.max_num_seqs == 256} == {"shared"}
    # the claim itself: the uncapped server simulates exactly what the capped one does
    chain = (1, 2, 4)
    capped = evaluate_module.simulate(request, Config("hisparse", 128, 4, 0), chain)
    uncapped = evaluate_module.simulate(request, Config("hisparse", 128, 256, 0), chain)
    assert [o.to_json() for o in capped] == [o.to_json() for o in uncapped]


def test_pruning_skips_what_it_claims_and_never_changes_the_answer() -> None:
    # without MTP, a lone request's TPOT (~11 ms) already misses 6 ms: the probe prunes the arm
    request = _request(arms="hisparse,hisparse-nomtp")
    pruned = search(request, jobs=1)
    full = search(request, jobs=1, prune=False, use_cache=False)
    skipped = [e for e in pruned.entries if e.source == "pruned"]
    assert {e.config.arm for e in skipped} == {"hisparse-nomtp"}
    assert len(skipped) == pruned.counts["pruned"] == 4  # c2 and c4 at two max-num-seqs
    assert full.counts["pruned"] == 0
    by_config = {e.config: e for e in full.entries}
    for entry in skipped:
        assert not qualifies(by_config[entry.config].outcome, request)  # the bound held
    assert [e.config for e in ranked(pruned)] == [e.config for e in ranked(full)]
    assert pruned.counts["simulated_sweeps"] < full.counts["simulated_sweeps"]
    # the c1 rows of the pruned arm are its probe's own point, identical to the full sweep's
    for entry in pruned.entries:
        full_outcome = by_config[entry.config].outcome
        if entry.source == "probe":
            assert entry.outcome is not None and full_outcome is not None
            assert entry.outcome.to_json() == full_outcome.to_json()


def test_a_cache_hit_returns_identical_results_without_simulating(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    request = _request()
    first = search(request, jobs=1)
    assert first.counts["simulated_sweeps"] == 3 and first.counts["cached_sweeps"] == 0

    def no_simulation(*args: object, **kwargs: object) -> None:
        raise AssertionError("simulated although cached")

    monkeypatch.setattr(evaluate_module, "simulate", no_simulation)
    again = search(request, jobs=1)
    assert again.counts["simulated_sweeps"] == 0 and again.counts["cached_sweeps"] == 3
    assert _outcomes(again) == _outcomes(first)
    other = _request(slo="tpot=7ms")  # the objectives are part of the key
    with pytest.raises(AssertionError, match="simulated although cached"):
        search(other, jobs=1)


def test_a_think_time_file_is_keyed_by_its_contents(tmp_path: Path) -> None:
    pauses = tmp_path / "pauses.json"
    pauses.write_text('{"pauses_s": [[0.5]]}', encoding="utf-8")
    think = f"{{kind: file, path: {pauses}}}"
    request = _request(think_time=think, concurrency="1,2", max_num_seqs="256")
    first = search(request, jobs=1)
    assert search(request, jobs=1).counts["cached_sweeps"] == 2
    pauses.write_text('{"pauses_s": [[5.0]]}', encoding="utf-8")
    changed = search(_request(think_time=think, concurrency="1,2", max_num_seqs="256"), jobs=1)
    assert changed.counts["simulated_sweeps"] == 2 and changed.counts["cached_sweeps"] == 0
    assert _outcomes(changed) != _outcomes(first)


def test_two_worker_processes_give_the_same_answer_and_progress_reaches_the_end() -> None:
    request = _request(arms="hisparse,offload")
    seen: list[tuple[int, int]] = []
    parallel = search(request, jobs=2, progress=lambda done, total: seen.append((done, total)))
    serial = search(request, jobs=1, use_cache=False)
    assert _outcomes(parallel) == _outcomes(serial)
    assert parallel.counts["simulated_sweeps"] == 6  # 2 probes + 2 arms x 2 servers
    assert seen[-1] == (12, 12) and [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_the_losing_arm_is_explained_with_the_search_numbers() -> None:
    request = _request(arms="hisparse,hisparse-nomtp")
    result = search(request, jobs=1, prune=False)
    (line,) = explain(result)
    closest = next(
        e
        for e in result.entries
        if e.config == Config("hisparse-nomtp", 128, 2, 1) and e.outcome is not None
    )
    p90 = _metric(closest, "p90_tpot_ms")
    assert line.startswith("hisparse-nomtp loses: no configuration meets tpot=6ms")
    assert f"TPOT p90 {p90:,.0f} ms > 6 ms" in line
