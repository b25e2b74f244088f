"""`forensics check-skip` (placeholder until its issue lands; replace this whole module)."""

from __future__ import annotations

from forensics.errors import ForensicsError


def check_skip_command() -> None:
    """Not built yet."""
    raise ForensicsError("forensics check-skip is not built yet")
