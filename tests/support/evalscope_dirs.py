"""Where a point's own EvalScope output lies in a run directory, written out independently of
the harness's layout code so that tests reading EvalScope's files check that code too."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def evalscope_point_dir(run_dir: Path, point: Any) -> Path:
    """The folder of EvalScope's benchmark_summary.json, percentiles and database for a point."""
    tag = f"parallel_{point.parallel}_number_{point.number}"
    return run_dir / "points" / point.point_id / "evalscope" / point.point_id / tag
