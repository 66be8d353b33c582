"""Per-module time budgets: seen at the end of every run, so growth is noticed before it hurts.

The budgets (tests/time_budgets.toml) are seconds of setup + call + teardown per test module,
measured on a 2-core CI machine with the CPU build cached, with headroom. Exceeding one is a
warning line naming the module, its time and its budget; it never fails the run, because a time
depends on the machine's load and a verdict must not.
"""

from __future__ import annotations

import tomllib
from collections import defaultdict
from pathlib import Path

import pytest

BUDGETS = Path(__file__).resolve().parents[1] / "time_budgets.toml"
_SPENT: defaultdict[str, float] = defaultdict(float)


def _module(nodeid: str) -> str:
    return "tests/" + nodeid.split("::", 1)[0].removeprefix("tests/")


def record(report: pytest.TestReport) -> None:
    _SPENT[_module(report.nodeid)] += report.duration


def load() -> tuple[dict[str, float], float]:
    """(module -> budget in seconds, default budget for a module not listed)."""
    data = tomllib.loads(BUDGETS.read_text(encoding="utf-8"))
    modules = {str(k): float(v) for k, v in data.get("modules", {}).items()}
    return modules, float(data["default_s"])


def report() -> list[str]:
    if not _SPENT:
        return []
    modules, default = load()
    lines = []
    for module, spent in sorted(_SPENT.items(), key=lambda kv: -kv[1]):
        budget = modules.get(module, default)
        if spent > budget:
            lines.append(
                f"WARNING time budget exceeded: {module} took {spent:.0f} s "
                f"(budget {budget:.0f} s, tests/time_budgets.toml)"
            )
    total = sum(_SPENT.values())
    lines.append(
        f"time budgets: {len(_SPENT)} modules, {total:.0f} s in tests, {len(lines)} over budget"
    )
    return lines
