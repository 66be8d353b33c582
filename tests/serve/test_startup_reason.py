"""A server's reason for exiting before it was ready, read from its log."""

from __future__ import annotations

from support.vllm_logs import CPU_REFUSAL as MSG

from harness.serve.startup import failure_reason

# Lines of the real vLLM 0.32.0 log behind CPU_REFUSAL, cut to the parts that matter: the engine
# core's logged traceback, its re-raise, then the API server's RuntimeError.
E = "(EngineCore pid=16718) ERROR 12-01 13:18:07 [core.py:1510]"

VLLM_LOG = f"""\
{E}     _check_enough_kv_cache_memory(
{E}     raise ValueError(
{E} ValueError: {MSG}
(EngineCore pid=16718) ERROR 12-01 13:18:11 [multiproc_executor.py:315] Worker proc VllmWorker-0 \
died unexpectedly (exit code: None), shutting down executor.
Process EngineCore:
Traceback (most recent call last):
    raise ValueError(
ValueError: {MSG}
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {{}}
"""


def test_the_root_cause_is_the_engine_cores_value_error():
    assert failure_reason(VLLM_LOG) == MSG


def test_without_a_value_error_the_last_error_line_and_none_without_any():
    log = "loading\nOSError: no such file\nKeyError: 'x'\nerror: repro's own line\n"
    assert failure_reason(log) == "'x'"
    assert failure_reason("INFO ready\nerror: lowercase is not an exception\n") is None
