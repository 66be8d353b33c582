"""CLI wiring for the dataset area (owned by that area's module)."""

from __future__ import annotations

import click


def register(group: click.Group) -> None:
    """Add this area's commands to the `repro` group."""
