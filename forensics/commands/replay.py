"""`forensics replay` (placeholder until its issue lands; replace this whole module)."""

from __future__ import annotations

from forensics.errors import ForensicsError


def replay_command() -> None:
    """Not built yet."""
    raise ForensicsError("forensics replay is not built yet")
