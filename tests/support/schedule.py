"""How the full run shares two cores (pytest-xdist, `-n 2`): which tests must stay together on
one worker, and in which order the work is handed out.

pytest 9 no longer lets a plugin rename a test's node id, so xdist's own `--dist loadgroup`
(which groups by an ``@group`` suffix on the node id) groups nothing. This scheduler groups by a
table instead: each worker, after collection and tiering, writes ``{nodeid: scope}`` to a file
named in an environment variable that the controller set before it spawned the workers; the
controller's scheduler reads it. A scope is a unit of work that one worker runs whole:

- a unit test (one by one, as xdist's default distribution: the workers stay balanced);
- ``shared-servers``: every e2e test on the session's shared vLLM servers (``server_factory``),
  so the servers start once, on one worker;
- ``slurm``: the Slurm tier (one local cluster, one job queue);
- any other module of the slow tiers (it starts what it needs itself).

The unit tier is handed out first, so a broken commit stops the run in minutes
(tests/support/tiers.py); then the slow scopes, longest first by their time budget
(tests/time_budgets.toml), so the two longest run side by side and the short ones fill in.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from . import budgets, tiers

SCOPES_ENV = "REPRO_TEST_SCOPES"
SHARED_SERVER_FIXTURES = {"server_factory", "shared_server"}


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def scopes_of(items: list[tuple[str, str, set[str]]]) -> dict[str, tuple[str, str]]:
    """{nodeid: (scope, tier)} for (nodeid, tier, fixture names) in collection order.

    A slow-tier module stays whole (its module fixtures start servers once), and goes to the
    shared-servers scope when any of its tests uses a shared server."""
    shared_modules = {
        module_of(nodeid)
        for nodeid, tier, fixtures in items
        if tier == "e2e" and fixtures & SHARED_SERVER_FIXTURES
    }
    table = {}
    for nodeid, tier, _ in items:
        module = module_of(nodeid)
        if tier == "unit":
            scope = nodeid  # test by test, as xdist's default: the workers stay balanced
        elif tier == "slurm":
            scope = "slurm"
        elif module in shared_modules:
            scope = "shared-servers"
        else:
            scope = module
        table[nodeid] = (scope, tier)
    return table


class DeferredInterrupt:
    """On a worker: the controller's Ctrl-C (`interrupt_workers`) raises KeyboardInterrupt only
    inside a test's setup, call or teardown. Between phases the worker is talking to the
    controller (a report half-sent when the interrupt lands leaves the controller reading a
    message that never ends, and the run hangs: seen once under load), so there the interrupt is
    held and raised as the next phase starts; a worker that starts no further test is shut down
    by the controller as usual."""

    def __init__(self) -> None:
        self.in_phase = False
        self.held = False

    def on_sigint(self, signum: int, frame: object) -> None:
        if self.in_phase:
            raise KeyboardInterrupt
        self.held = True

    def _phase(self):
        if self.held:
            self.held = False
            raise KeyboardInterrupt
        self.in_phase = True
        try:
            return (yield)
        finally:
            self.in_phase = False

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        return (yield from self._phase())

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        return (yield from self._phase())

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None):
        return (yield from self._phase())


def configure(config: pytest.Config) -> None:
    """On the xdist controller: the file the workers will write their scope table to. On a
    worker: its pid beside it, so that the controller can interrupt it (`interrupt_workers`),
    and the handler that holds such an interrupt until a test phase (`DeferredInterrupt`)."""
    if hasattr(config, "workerinput"):
        path = os.environ.get(SCOPES_ENV)
        if path:
            worker = config.workerinput["workerid"]
            deferred = DeferredInterrupt()
            config.pluginmanager.register(deferred, "repro-deferred-interrupt")
            signal.signal(signal.SIGINT, deferred.on_sigint)
            Path(f"{path}.pid.{worker}").write_text(str(os.getpid()))
        return
    if not getattr(config.option, "numprocesses", None):
        return
    fd, path = tempfile.mkstemp(prefix="repro-test-scopes-", suffix=".json")
    os.close(fd)
    os.environ[SCOPES_ENV] = path


def write_scopes(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a worker: publish each collected item's scope and tier (atomically: both write)."""
    path = os.environ.get(SCOPES_ENV)
    if not path or not hasattr(config, "workerinput"):
        return
    table = scopes_of([(it.nodeid, tiers.tier_of(it), set(it.fixturenames)) for it in items])
    tmp = Path(f"{path}.{config.workerinput['workerid']}")
    tmp.write_text(json.dumps(table), encoding="utf-8")
    tmp.replace(path)


def unconfigure(config: pytest.Config) -> None:
    path = os.environ.get(SCOPES_ENV)
    if path and not hasattr(config, "workerinput"):
        for leftover in Path(path).parent.glob(Path(path).name + ".*"):
            leftover.unlink(missing_ok=True)
        Path(path).unlink(missing_ok=True)


def interrupt_workers(worker_ids: set[str]) -> None:
    """Ctrl-C to the given workers: the test in flight ends with KeyboardInterrupt and the worker
    tears its fixtures (servers) down as on a user's Ctrl-C. xdist alone would let a worker
    finish every test already handed to it. Workers with nothing left to run are not
    interrupted: the controller's shutdown ends them cleanly."""
    path = os.environ.get(SCOPES_ENV)
    if not path:
        return
    for worker in sorted(worker_ids):
        pid_file = Path(f"{path}.pid.{worker}")
        try:
            os.kill(int(pid_file.read_text()), signal.SIGINT)
        except (OSError, ValueError):
            pass  # already gone


def read_scopes() -> dict[str, tuple[str, str]]:
    path = os.environ.get(SCOPES_ENV, "")
    text = Path(path).read_text(encoding="utf-8") if path else ""
    return {k: (v[0], v[1]) for k, v in json.loads(text).items()} if text.strip() else {}


def order_scopes(
    queue: list[tuple[str, dict[str, bool]]], table: dict[str, tuple[str, str]]
) -> list[tuple[str, dict[str, bool]]]:
    """Unit scopes first, then the slow scopes by their modules' summed time budgets, longest
    first. Unit tests of a budgeted module go first, by its budget per unit test (mypy's single
    test, the longest, would otherwise start last and run alone); the rest in collection order."""
    module_budgets, default = budgets.load()

    def tier(entry: tuple[str, dict[str, bool]]) -> str:
        first = next(iter(entry[1]))
        return table.get(first, ("", "unit"))[1]

    def weight(entry: tuple[str, dict[str, bool]]) -> float:
        modules = {nodeid.split("::", 1)[0] for nodeid in entry[1]}
        return sum(module_budgets.get(m, default) for m in modules)

    units = [entry for entry in queue if tier(entry) == "unit"]
    slow = [entry for entry in queue if tier(entry) != "unit"]
    per_module = Counter(module_of(nodeid) for entry in units for nodeid in entry[1])

    def unit_weight(entry: tuple[str, dict[str, bool]]) -> float:
        module = module_of(next(iter(entry[1])))
        return module_budgets.get(module, 0.0) / per_module[module]

    return sorted(units, key=unit_weight, reverse=True) + sorted(slow, key=weight, reverse=True)


def make_scheduler(config: pytest.Config, log, unit_failures: Callable[[], list[str]]):
    """The controller's scheduler. Once a unit test has failed it hands out no slow scope, and
    once the whole unit tier has reported it stops the run (slow scopes already running
    included): a broken commit fails in minutes. REPRO_TESTS_CONTINUE_AFTER_UNIT_FAILURE=1 runs
    everything anyway."""
    from xdist.scheduler import LoadScopeScheduling

    keep_going = os.environ.get("REPRO_TESTS_CONTINUE_AFTER_UNIT_FAILURE") == "1"

    class TierScheduling(LoadScopeScheduling):
        def __init__(self, config: pytest.Config, log=None) -> None:
            super().__init__(config, log)
            self._table: dict[str, tuple[str, str]] | None = None
            self._ordered = False
            self._units_done: set[str] = set()

        def _scopes(self) -> dict[str, tuple[str, str]]:
            if self._table is None:
                self._table = read_scopes()
            return self._table

        def _split_scope(self, nodeid: str) -> str:
            entry = self._scopes().get(nodeid)
            return entry[0] if entry else nodeid.split("::", 1)[0]

        def _is_unit(self, nodeid: str) -> bool:
            return self._scopes().get(nodeid, ("", "unit"))[1] == "unit"

        def _assign_work_unit(self, node) -> None:
            if not self._ordered:
                self._ordered = True
                ordered = order_scopes(list(self.workqueue.items()), self._scopes())
                self.workqueue.clear()
                self.workqueue.update(ordered)
            head = next(iter(next(iter(self.workqueue.values()))))
            if unit_failures() and not keep_going and not self._is_unit(head):
                node.shutdown()  # no slow scope after a unit failure
                return
            super()._assign_work_unit(node)

        def mark_test_complete(self, node, item_index: int, duration: float = 0) -> None:
            nodeid = self.registered_collections[node][item_index]
            if self._is_unit(nodeid):
                self._units_done.add(nodeid)
            super().mark_test_complete(node, item_index, duration)
            failed = unit_failures()
            units = sum(1 for _, tier in self._scopes().values() if tier == "unit")
            if failed and not keep_going and len(self._units_done) >= units:
                dsession = config.pluginmanager.getplugin("dsession")
                if dsession is not None and not dsession.shouldstop:
                    dsession.shouldstop = tiers.stop_message(len(failed))
                    reporter = config.pluginmanager.getplugin("terminalreporter")
                    if reporter is not None:
                        reporter.write_line(f"stopping: {dsession.shouldstop}", red=True)
                    interrupt_workers(
                        {
                            str(worker.gateway.id)
                            for worker, work in self.assigned_work.items()
                            if self._pending_of(work)
                        }
                    )

    return TierScheduling(config, log)
