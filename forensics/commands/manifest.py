"""`forensics manifest` (placeholder until its issue lands; replace this whole module)."""

from __future__ import annotations

from forensics.errors import ForensicsError


def manifest_command() -> None:
    """Not built yet."""
    raise ForensicsError("forensics manifest is not built yet")
