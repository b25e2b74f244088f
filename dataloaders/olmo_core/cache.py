"""On-disk cache of rebuilt global indices, so a second replay of a large run skips the shuffle.

The file name is OLMo-core's own (`global_indices_*_seed{s}_epoch{e}_dataset_size{n}_v1.npy`),
which names everything the permutation depends on. Entries live in $FORENSICS_CACHE/olmo-core
(default ~/.cache/forensics/olmo-core); a wrong-sized or unreadable entry is ignored and rebuilt.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np


def cache_root() -> Path:
    env = os.environ.get("FORENSICS_CACHE")
    return (Path(env) if env else Path.home() / ".cache" / "forensics") / "olmo-core"


def load_indices(name: str) -> np.ndarray | None:
    """A cached permutation (raw uint32), or None."""
    path = cache_root() / name
    try:
        return np.fromfile(path, dtype=np.uint32)
    except (OSError, ValueError):
        return None


def save_indices(name: str, indices: np.ndarray) -> None:
    """Store a permutation atomically; a cache that cannot be written is skipped silently."""
    root = cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".tmp-", suffix=".npy")
        with os.fdopen(fd, "wb") as handle:
            np.asarray(indices, dtype=np.uint32).tofile(handle)
        os.replace(tmp, root / name)
    except OSError:
        return
