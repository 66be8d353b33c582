"""`repro capacity`: the blog's HiSparse concurrency calculator, models as data, figures, and
predicted-vs-measured occupancy for a run.

Public entry points (imported lazily, so the command stays fast):

- `make_deployment(model="glm-5.3", gpu="h200", tp=8, ...)`, `evaluate(dep, seq_len)`
  (harness.capacity.formulas): the calculator.
- `capacity_figures(dep, results=...)` or `capacity_figures(run=RUN_DIR_OR_RUN)`
  (harness.capacity.figures): Plotly figures for dashboards; raises `NoCapacityModel` (a
  ConfigError) for runs of models without a file in launch/models/.
- `compare_run(run)` (harness.capacity.measured): predicted limits beside measured occupancy.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "make_deployment": "harness.capacity.deployment",
    "evaluate": "harness.capacity.formulas",
    "evaluate_many": "harness.capacity.formulas",
    "Deployment": "harness.capacity.deployment",
    "SeqResult": "harness.capacity.formulas",
    "capacity_figures": "harness.capacity.figures",
    "write_html": "harness.capacity.figures",
    "compare_run": "harness.capacity.measured",
    "NoCapacityModel": "harness.capacity.measured",
    "RunComparison": "harness.capacity.measured",
    "load_model": "harness.capacity.model",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'harness.capacity' has no attribute {name!r}")
