"""`forensics triage` (placeholder until its issue lands; replace this whole module)."""

from __future__ import annotations

from forensics.errors import ForensicsError


def triage_command() -> None:
    """Not built yet."""
    raise ForensicsError("forensics triage is not built yet")
