"""On-disk cache of what a replay rebuilds: global indices and document boundaries.

Global indices are stored under OLMo-core's own file name
(`global_indices_*_seed{s}_epoch{e}_dataset_size{n}_v1.npy`), which names everything the
permutation depends on. Document ends of a token file are keyed by its path, size, mtime and the
EOS/BOS ids (or its metadata file's path, size and mtime). Entries live in
$FORENSICS_CACHE/olmo-core (default ~/.cache/forensics/olmo-core); a wrong-sized or unreadable
entry is ignored and rebuilt, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from dataloaders.cache_dir import forensics_cache


def cache_root() -> Path:
    return forensics_cache("olmo-core")


def load_indices(name: str) -> np.ndarray | None:
    """A cached permutation (raw uint32), or None."""
    path = cache_root() / name
    try:
        return np.fromfile(path, dtype=np.uint32)
    except (OSError, ValueError):
        return None


def save_indices(name: str, indices: np.ndarray) -> None:
    """Store a permutation atomically; a cache that cannot be written is skipped silently."""
    _save(name, np.asarray(indices, dtype=np.uint32))


def _save(name: str, array: np.ndarray) -> None:
    root = cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".tmp-", suffix=".npy")
        with os.fdopen(fd, "wb") as handle:
            array.tofile(handle)
        os.replace(tmp, root / name)
    except OSError:
        return


def doc_ends_name(path: Path, source: Path, **key: Any) -> str:
    """Cache file name for the document ends of token file `path` read from `source` (the file
    itself or its metadata), with everything else they depend on in `key`."""
    stat = source.stat()
    payload = [str(path.resolve()), str(source.resolve()), stat.st_size, stat.st_mtime_ns, key]
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]
    return f"doc_ends-{digest}.npy"


def load_doc_ends(name: str) -> np.ndarray | None:
    try:
        return np.fromfile(cache_root() / name, dtype=np.int64)
    except (OSError, ValueError):
        return None


def save_doc_ends(name: str, ends: np.ndarray) -> None:
    _save(name, np.asarray(ends, dtype=np.int64))


def doc_ends_name_remote(url: str, etag: str, size: int, **key: Any) -> str:
    """doc_ends_name for a token file in object storage: keyed by its URL, ETag and size."""
    payload = [url, etag, size, key]
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()
    return f"doc_ends-{digest[:24]}.npy"
