"""CLI wiring for the tiny local models (owned by harness/tiny)."""

from __future__ import annotations

import click


def register(group: click.Group) -> None:
    """Add this area's commands to the `repro` group."""
