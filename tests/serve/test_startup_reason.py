"""A server's reason for exiting before it was ready, read from its log."""

from __future__ import annotations

from harness.serve.startup import failure_reason

# The shape of a vLLM 0.32 start-up log when the KV check fails: the engine core's traceback,
# then the API server's RuntimeError pointing back at it.
VLLM_LOG = """\
INFO 12-01 13:00:01 [api_server.py:1830] vLLM API server version 0.32.0
(EngineCore_DP0 pid=4242) ERROR 12-01 13:01:02 [core.py:812] EngineCore failed to start.
(EngineCore_DP0 pid=4242) Traceback (most recent call last):
(EngineCore_DP0 pid=4242)   File "vllm/v1/core/kv_cache_utils.py", line 1030, in _check_enough
(EngineCore_DP0 pid=4242) ValueError: To serve at least one request with the model's max seq \
len (1048576), (46.58 GiB KV cache is needed, which is larger than the available KV cache memory \
(17.8 GiB).
Traceback (most recent call last):
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""


def test_the_root_cause_is_the_engine_cores_value_error():
    assert failure_reason(VLLM_LOG) == (
        "To serve at least one request with the model's max seq len (1048576), (46.58 GiB KV "
        "cache is needed, which is larger than the available KV cache memory (17.8 GiB)."
    )


def test_without_a_value_error_the_last_error_line_and_none_without_any():
    log = "loading\nOSError: no such file\nKeyError: 'x'\nerror: repro's own line\n"
    assert failure_reason(log) == "'x'"
    assert failure_reason("INFO ready\nerror: lowercase is not an exception\n") is None
