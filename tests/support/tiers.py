"""Test tiers, applied automatically so that no test can land without one.

A test's tier is decided by what it needs, not by a marker somebody must remember:

- ``slurm``   — it submits to the local Slurm cluster (the ``slurm`` fixture or a Slurm module);
- ``e2e``     — it needs the real CPU vLLM build (``cpu_build`` and the fixtures built on it);
- ``browser`` — it drives Chromium (the dashboard checks, static figure export via kaleido);
- ``simhttp`` — it starts the simulated vLLM engine behind HTTP;
- ``unit``    — everything else: no build, no server, no browser, no Slurm (the fast tier).

The full run executes the tiers in that order reversed (unit first, Slurm last), and stops
after the unit tier when a unit test failed: a broken commit fails in minutes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

TIERS = ("unit", "simhttp", "browser", "e2e", "slurm")  # execution order
TIER_DOCS = {
    "unit": "fast tier: no vLLM build, no server, no browser, no Slurm (applied automatically)",
    "simhttp": "starts the simulated vLLM engine behind HTTP (applied automatically)",
    "browser": "drives headless Chromium (applied automatically)",
    "e2e": "needs the real CPU vLLM build (applied automatically)",
    "slurm": "submits jobs to the local Slurm cluster (applied automatically)",
}

BUILD_FIXTURES = {"cpu_build", "server_factory", "tiny_model_path", "shared_server"}
SLURM_FIXTURES = {"slurm"}
BROWSER_FIXTURES = {"chromium", "devtools"}
SIMHTTP_FIXTURES = {"sim_http_server"}

# Modules whose every test has a tier its fixtures do not show (a subprocess starts the thing).
MODULE_TIERS = {
    "tests/e2e/test_slurm_e2e.py": "slurm",
    "tests/cluster/test_slurm_jobs.py": "slurm",
    "tests/e2e/test_simserve_blog.py": "simhttp",
    "tests/e2e/test_simserve_faults.py": "simhttp",
    "tests/e2e/test_simserve_protocol.py": "simhttp",
    "tests/simserve/test_simserve_refusal.py": "simhttp",
    "tests/simserve/test_think_time_simhttp.py": "simhttp",
    "tests/report/test_dashboard_browser.py": "browser",
    "tests/report/test_figures_export.py": "browser",
}

ROOT = Path(__file__).resolve().parents[2]
UNIT_FAILED = pytest.StashKey[list[str]]()


def _relative(item: pytest.Item) -> str:
    path = Path(str(item.path)).resolve()
    if path.is_relative_to(ROOT):
        return path.relative_to(ROOT).as_posix()
    return path.relative_to(Path(str(item.config.rootpath)).resolve()).as_posix()


def tier_of(item: pytest.Item) -> str:
    rel = _relative(item)
    fixtures = set(getattr(item, "fixturenames", ()))
    by_module = MODULE_TIERS.get(rel)
    if by_module == "slurm" or fixtures & SLURM_FIXTURES:
        return "slurm"
    if fixtures & BUILD_FIXTURES or (rel.startswith("tests/e2e/") and by_module is None):
        return "e2e"
    if by_module == "browser" or fixtures & BROWSER_FIXTURES:
        return "browser"
    if by_module == "simhttp" or fixtures & SIMHTTP_FIXTURES:
        return "simhttp"
    return "unit"


def register(config: pytest.Config) -> None:
    for name, doc in TIER_DOCS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")


def apply(session: pytest.Session, items: list[pytest.Item]) -> None:
    """Mark each item with exactly one tier and order the run by tier (stable within a tier)."""
    tiers = {}
    for item in items:
        tier = tier_of(item)
        for other in TIERS:
            if other != tier and item.get_closest_marker(other) is not None:
                raise pytest.UsageError(
                    f"{item.nodeid}: marked '{other}' by hand but its tier is '{tier}' "
                    "(tiers are applied from fixtures and paths: tests/support/tiers.py)"
                )
        item.add_marker(getattr(pytest.mark, tier))
        tiers[item.nodeid] = tier
    items.sort(key=lambda it: TIERS.index(tiers[it.nodeid]))
    session.stash[UNIT_FAILED] = []


def record(session: pytest.Session, report: pytest.TestReport) -> None:
    if report.failed and "unit" in report.keywords:
        session.stash.setdefault(UNIT_FAILED, []).append(report.nodeid)


def stop_after_unit_tier(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Once the unit tier is over (for this process), stop if a unit test failed: the slow
    tiers are not worth running on a broken commit. Under xdist, the worker stops and the
    controller then stops the others."""
    failed = item.session.stash.get(UNIT_FAILED, [])
    if (
        failed
        and item.get_closest_marker("unit") is not None
        and nextitem is not None
        and nextitem.get_closest_marker("unit") is None
        and os.environ.get("REPRO_TESTS_CONTINUE_AFTER_UNIT_FAILURE") != "1"
    ):
        item.session.shouldstop = stop_message(len(failed))


def stop_message(failed: int) -> str:
    return (
        f"{failed} unit test(s) failed; the simhttp/browser/e2e/slurm tiers were not run or "
        "were stopped (REPRO_TESTS_CONTINUE_AFTER_UNIT_FAILURE=1 runs them anyway)"
    )


def require(what: str, hint: str) -> None:
    """A missing prerequisite: skipped on a developer's machine, a failure where
    REPRO_TESTS_REQUIRE_ALL=1 (CI), so that a tier never passes by not running."""
    message = f"{what} is not available; {hint}"
    if os.environ.get("REPRO_TESTS_REQUIRE_ALL") == "1":
        pytest.fail(f"{message} (REPRO_TESTS_REQUIRE_ALL=1: a missing prerequisite fails)")
    pytest.skip(message)
