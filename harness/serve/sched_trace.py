"""Start a vLLM server with its scheduler's decisions recorded (`harness.sim.trace_check`).

The tracer (`harness/data/vllm_side/repro_sched_trace.py`) subclasses vLLM's own scheduler
inside the server's Python and changes nothing it decides. A profile override list turns it on
for one run: the scheduler class, that folder on the server's PYTHONPATH, and the trace file.
"""

from __future__ import annotations

from pathlib import Path

VLLM_SIDE = Path(__file__).resolve().parents[1] / "data" / "vllm_side"
TRACING_SCHEDULER = "repro_sched_trace.TracingScheduler"
TRACE_ENV = "REPRO_SCHED_TRACE"


def trace_overrides(trace: Path | str) -> list[str]:
    """`--set` overrides that make the run's server write its scheduler trace to `trace`."""
    return [
        f"serve.scheduler-cls={TRACING_SCHEDULER}",
        f"env.PYTHONPATH={VLLM_SIDE}",
        f"env.{TRACE_ENV}={Path(trace).resolve()}",
    ]
