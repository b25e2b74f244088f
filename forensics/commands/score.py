"""`forensics score` (placeholder until its issue lands; replace this whole module)."""

from __future__ import annotations

from forensics.errors import ForensicsError


def score_command() -> None:
    """Not built yet."""
    raise ForensicsError("forensics score is not built yet")
