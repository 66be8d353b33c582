"""`free_port` picks below the kernel's ephemeral range, where no bind to port 0 (vLLM's way of
picking its internal ports) can take the port before the server binds it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from harness.serve import lifecycle
from harness.serve.lifecycle import free_port


def _kernel_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    span = tmp_path / "ip_local_port_range"
    span.write_text(text)
    monkeypatch.setattr(lifecycle, "_EPHEMERAL_RANGE", span)


def _assert_bindable(port: int) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_the_port_is_below_the_ephemeral_range_and_bindable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _kernel_range(tmp_path, monkeypatch, "40000\t60999\n")
    ports = {free_port() for _ in range(20)}
    assert all(10_000 <= p < 40_000 for p in ports)
    _assert_bindable(ports.pop())  # free as promised


def test_a_busy_port_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            spare = probe.getsockname()[1]
        draws = iter([taken, spare])

        class Scripted:
            def randrange(self, low: int, high: int) -> int:
                return next(draws)

        monkeypatch.setattr(lifecycle.random, "SystemRandom", Scripted)
        monkeypatch.setattr(lifecycle, "_ephemeral_low", lambda: 65_535)
        assert free_port() == spare


def test_without_room_below_the_range_the_kernel_picks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _kernel_range(tmp_path, monkeypatch, "1024 65535\n")
    port = free_port()
    assert 1024 <= port <= 65535
    _assert_bindable(port)
