"""Every collected test gets exactly one tier, from what it uses (tests/support/tiers.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from support import tiers

ROOT = Path(__file__).resolve().parents[1]


def _item(path: str, *fixtures: str):
    return SimpleNamespace(path=ROOT / path, fixturenames=list(fixtures))


@pytest.mark.parametrize(
    ("path", "fixtures", "tier"),
    [
        ("tests/analysis/test_x.py", (), "unit"),
        ("tests/serve/test_doctor.py", ("cpu_build",), "e2e"),  # a unit folder, the real build
        ("tests/e2e/test_sweep_e2e.py", ("tmp_path",), "e2e"),
        ("tests/e2e/test_slurm_e2e.py", ("server_factory", "slurm"), "slurm"),
        ("tests/cluster/test_slurm_jobs.py", (), "slurm"),
        ("tests/report/test_dashboard_browser.py", (), "browser"),
        ("tests/e2e/test_simserve_blog.py", (), "simhttp"),
        ("tests/simserve/test_simserve_units.py", (), "unit"),
    ],
)
def test_tier_follows_fixtures_and_paths(path: str, fixtures: tuple[str, ...], tier: str):
    assert tiers.tier_of(_item(path, *fixtures)) == tier


def test_this_session_tiered_every_item(request: pytest.FixtureRequest):
    items = request.session.items
    assert items
    for item in items:
        marks = [t for t in tiers.TIERS if item.get_closest_marker(t) is not None]
        assert len(marks) == 1, (item.nodeid, marks)


def test_collection_order_puts_the_unit_tier_first(request: pytest.FixtureRequest):
    order = [
        next(t for t in tiers.TIERS if item.get_closest_marker(t)) for item in request.session.items
    ]
    assert order == sorted(order, key=tiers.TIERS.index)


INNER_CONFTEST = f"""
import sys
sys.path.insert(0, {str(ROOT / "tests")!r})
from support import tiers

_SESSION = []

def pytest_configure(config):
    tiers.register(config)

def pytest_sessionstart(session):
    _SESSION.append(session)

def pytest_collection_modifyitems(session, config, items):
    tiers.apply(session, items)

def pytest_runtest_logreport(report):
    tiers.record(_SESSION[0], report)

def pytest_runtest_teardown(item, nextitem):
    tiers.stop_after_unit_tier(item, nextitem)
"""


def _inner(pytester: pytest.Pytester, unit_body: str) -> pytest.RunResult:
    pytester.makeconftest(INNER_CONFTEST)
    pytester.mkdir("tests")
    pytester.mkdir("tests/e2e")
    (pytester.path / "tests" / "e2e" / "test_server.py").write_text("def test_e2e():\n    pass\n")
    (pytester.path / "tests" / "test_fast.py").write_text(
        f"def test_one():\n    {unit_body}\n\ndef test_two():\n    pass\n"
    )
    return pytester.runpytest("-p", "no:cacheprovider", "-v", "--strict-markers")


def test_a_unit_failure_stops_the_run_before_the_slow_tiers(pytester: pytest.Pytester):
    result = _inner(pytester, "assert False")
    result.assert_outcomes(failed=1, passed=1)  # both unit tests ran; the e2e test did not
    result.stdout.fnmatch_lines(["*1 unit test(s) failed; the simhttp/browser/e2e/slurm tiers*"])
    assert "test_e2e" not in result.stdout.str()


def test_the_slow_tiers_run_after_a_clean_unit_tier(pytester: pytest.Pytester):
    result = _inner(pytester, "pass")
    result.assert_outcomes(passed=3)
    lines = [ln for ln in result.stdout.lines if "PASSED" in ln]
    assert "test_e2e" in lines[-1]  # collected first (alphabetically), run last


def test_a_hand_marked_tier_that_contradicts_the_rule_is_refused(pytester: pytest.Pytester):
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makepyfile(test_marked="import pytest\n\n@pytest.mark.e2e\ndef test_x():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*marked 'e2e' by hand but its tier is 'unit'*"])


XDIST_CONFTEST = f"""
import os, sys
sys.path.insert(0, {str(ROOT / "tests")!r})
import pytest
from support import schedule, tiers

_SESSION = []

def pytest_configure(config):
    tiers.register(config)
    schedule.configure(config)

def pytest_unconfigure(config):
    schedule.unconfigure(config)

def pytest_xdist_make_scheduler(config, log):
    return schedule.make_scheduler(
        config, log, lambda: _SESSION[0].stash.get(tiers.UNIT_FAILED, []) if _SESSION else []
    )

def pytest_sessionstart(session):
    _SESSION.append(session)

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    tiers.apply(session, items)
    schedule.write_scopes(config, items)

def pytest_runtest_logreport(report):
    if _SESSION:
        tiers.record(_SESSION[0], report)

@pytest.fixture(scope="session")
def server_factory():
    return os.environ["PYTEST_XDIST_WORKER"]
"""

SHARED_SERVER_TEST = """
import os
def _note(tag, worker):
    with open(os.path.join(os.environ["NOTES"], tag), "w") as f:
        f.write(worker)
"""


def _xdist_tree(pytester: pytest.Pytester, unit_body: str, e2e_body: str) -> None:
    pytester.makeconftest(XDIST_CONFTEST)
    pytester.mkdir("tests")
    pytester.mkdir("tests/e2e")
    for name in ("a", "b", "c"):  # three modules on the shared servers
        (pytester.path / "tests" / "e2e" / f"test_{name}.py").write_text(
            SHARED_SERVER_TEST
            + f"def test_{name}(server_factory):\n    {e2e_body}\n    _note('{name}', server_factory)\n"
        )
    for name in ("x", "y", "z"):
        (pytester.path / "tests" / f"test_unit_{name}.py").write_text(
            "def test_1():\n    pass\n\ndef test_2():\n    pass\n"
        )
    (pytester.path / "tests" / "test_unit_w.py").write_text(f"def test_w():\n    {unit_body}\n")


def test_under_xdist_shared_server_tests_stay_on_one_worker(pytester: pytest.Pytester, tmp_path):
    _xdist_tree(pytester, "pass", "pass")
    result = _run_xdist(pytester, tmp_path)
    result.assert_outcomes(passed=10)
    workers = {(tmp_path / name).read_text() for name in ("a", "b", "c")}
    assert len(workers) == 1, workers  # one worker, so the servers start once
    units = [ln for ln in result.stdout.lines if "PASSED" in ln and "test_unit_" in ln]
    assert {ln.split("]")[0] for ln in units} == {"[gw0", "[gw1"}  # the unit tier on both


def _run_xdist(pytester: pytest.Pytester, notes: Path) -> pytest.RunResult:
    import os

    os.environ["NOTES"] = str(notes)
    try:
        # A bound against a hang (the stop path must end the run), not a speed verdict.
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "-v", timeout=300)
    finally:
        del os.environ["NOTES"]


def test_under_xdist_a_unit_failure_stops_the_slow_scopes(pytester: pytest.Pytester, tmp_path):
    # The shared-server tests block until a file appears that nothing writes: they either never
    # start (no slow scope is handed out after the failure) or are stopped once the unit tier
    # has reported. Either way none of them passes, and the run names the failure.
    _xdist_tree(pytester, "assert False", "_wait_forever()")
    (pytester.path / "tests" / "e2e" / "conftest.py").write_text(
        "import os, time\nimport builtins\n"
        "def _wait_forever():\n"
        "    while not os.path.exists(os.path.join(os.environ['NOTES'], 'never')):\n"
        "        time.sleep(0.05)\n"
        "builtins._wait_forever = _wait_forever\n"
    )
    result = _run_xdist(pytester, tmp_path)
    assert result.ret != 0
    assert not list(tmp_path.glob("[abc]"))  # no shared-server test finished
    result.stdout.fnmatch_lines(["*1 unit test(s) failed*"])


def test_an_interrupt_between_test_phases_is_held_until_the_next_phase():
    from support.schedule import DeferredInterrupt

    deferred = DeferredInterrupt()
    deferred.on_sigint(2, None)  # between phases: reporting to the controller, not interrupted
    assert deferred.held
    phase = deferred._phase()
    with pytest.raises(KeyboardInterrupt):  # raised as the next phase starts
        next(phase)
    assert not deferred.held and not deferred.in_phase


def test_an_interrupt_inside_a_test_phase_is_raised_at_once():
    from support.schedule import DeferredInterrupt

    deferred = DeferredInterrupt()
    phase = deferred._phase()
    next(phase)  # the phase has started
    assert deferred.in_phase
    with pytest.raises(KeyboardInterrupt):
        deferred.on_sigint(2, None)
    with pytest.raises(StopIteration):
        phase.send(None)  # the phase ends
    assert not deferred.in_phase


def test_the_unit_tier_is_handed_out_by_budget_per_test_then_the_slow_scopes_longest_first(
    monkeypatch: pytest.MonkeyPatch,
):
    from support import budgets, schedule

    budgets_by_module = {
        "tests/test_mypy.py": 100.0,
        "tests/test_few.py": 30.0,
        "tests/e2e/b.py": 9.0,
    }
    monkeypatch.setattr(budgets, "load", lambda: (budgets_by_module, 5.0))
    ids = [
        ("tests/test_a.py::test_1", "unit"),
        ("tests/test_few.py::test_1", "unit"),
        ("tests/test_few.py::test_2", "unit"),
        ("tests/test_a.py::test_2", "unit"),
        ("tests/test_mypy.py::test_clean", "unit"),
        ("tests/e2e/a.py::test_1", "e2e"),
        ("tests/e2e/b.py::test_1", "e2e"),
    ]
    table = {nodeid: (nodeid if t == "unit" else nodeid.split("::")[0], t) for nodeid, t in ids}
    queue = [(nodeid, {nodeid: False}) for nodeid, _ in ids]
    order = [scope for scope, _ in schedule.order_scopes(queue, table)]
    assert order == [
        "tests/test_mypy.py::test_clean",  # 100 s for one test
        "tests/test_few.py::test_1",  # 15 s per test, collection order kept
        "tests/test_few.py::test_2",
        "tests/test_a.py::test_1",  # unbudgeted: collection order
        "tests/test_a.py::test_2",
        "tests/e2e/b.py::test_1",  # 9 s budget before the default's 5 s
        "tests/e2e/a.py::test_1",
    ]
