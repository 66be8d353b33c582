"""Output correctness per arm: greedy probes judged against a reference arm's recorded replies,
garbage signatures, MTP acceptance sanity and a long-context needle (issue 14).

The sweep calls `check_for_sweep` right after readiness; `repro coherence` runs it alone.
"""

from harness.coherence.check import (
    check_for_sweep,
    coherence_line,
    plan_check,
    point_invalid_reason,
    run_check,
)
from harness.results import CoherenceRecord

CoherenceResult = CoherenceRecord  # the typed, serialisable record the manifest stores

__all__ = [
    "CoherenceResult",
    "check_for_sweep",
    "coherence_line",
    "plan_check",
    "point_invalid_reason",
    "run_check",
]
