"""`forensics spike` (placeholder until its issue lands; replace this whole module)."""

from __future__ import annotations

from forensics.errors import ForensicsError


def spike_command() -> None:
    """Not built yet."""
    raise ForensicsError("forensics spike is not built yet")
