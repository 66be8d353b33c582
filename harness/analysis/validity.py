"""Whether a point's measurement counts: the one set of rules for every engine's points (the
served sweep's `harness.run.point` and the offline `harness.sim.run`), from a
:class:`harness.measurement.Measurement` only (docs/results.md, "Points").

A point is invalid when its measurement could not be read, when the client failed a request
(a failed turn abandons the rest of its conversation, docs/pitfalls.md "silent failures"), when
the requests are not conversations x turns, when the client wrote a failure sentinel for a
figure, or when no `/metrics` sample was taken. What only a served point can show (the client's
exit, the server's death, counter resets) is added by its runner.
"""

from __future__ import annotations

from harness.measurement import Measurement


def invalid_reasons(m: Measurement, *, conversations: int, turns: int) -> list[str]:
    """Why ``m`` makes its point invalid, in order (empty: it does not)."""
    reasons = list(m.problems)
    client = m.client
    if client is not None:
        expected = conversations * turns
        if client.failed_requests:
            reasons.append(_failed(m, client.failed_requests))
        if client.total_requests != expected:
            reasons.append(
                f"total requests {client.total_requests} != "
                f"{conversations} conversations x {turns} turns = {expected}"
            )
        elif client.success_requests != expected:
            reasons.append(f"success requests {client.success_requests} != {expected}")
        if client.sentinels:
            reasons.append(
                f"{m.client_name} reported no measurement for "
                + ", ".join(client.sentinels)
                + " (stored as null)"
            )
    if not m.samples:
        reasons.append("no /metrics sample in the point's window")
    return reasons


def _failed(m: Measurement, count: int) -> str:
    """The failed requests, with their causes when the requests say them."""
    causes = sorted({r.error for r in m.requests if not r.success and r.error})
    if causes:
        return f"{count} failed requests ({'; '.join(causes)})"
    return f"{m.client_name} reported {count} failed requests"
