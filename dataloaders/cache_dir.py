"""Where every loader family keeps what it caches between replays (index arrays, order plans,
checked-file stamps): one root, so `$FORENSICS_CACHE` moves all of it and a family's entries
sit in a folder of their own under it."""

from __future__ import annotations

import os
from pathlib import Path


def forensics_cache(*parts: str) -> Path:
    """$FORENSICS_CACHE (default ~/.cache/forensics), joined with `parts`."""
    env = os.environ.get("FORENSICS_CACHE")
    root = Path(env) if env else Path.home() / ".cache" / "forensics"
    return root.joinpath(*parts)
