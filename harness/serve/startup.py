"""Why a server exited before it was ready, read from its own log.

vLLM's engine core logs the traceback of what stopped it and the API server then fails with
"Engine core initialization failed. See root cause above.": the root cause is the first
ValueError line (e.g. "To serve at least one request with the model's max seq len ..."),
prefixed by the process tag ("(EngineCore_DP0 pid=...)"). Without one, the last error line.
"""

from __future__ import annotations

import re

ERROR_LINE = re.compile(r"\b(\w*(?:Error|Exception)): (\S.*?)\s*$")


def failure_reason(log_text: str) -> str | None:
    """The server's own reason (the exception message, without its class), or None."""
    found = [m for m in map(ERROR_LINE.search, log_text.splitlines()) if m]
    if not found:
        return None
    root = next((m for m in found if m.group(1) == "ValueError"), found[-1])
    return root.group(2)
