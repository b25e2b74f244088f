"""On-disk cache of a source's token counts, so a second `forensics spike` does not tokenize the
whole corpus again (the one cost of a torchtitan plan that grows with the corpus).

The key hashes what the counts depend on: every file's path, size and mtime, the file format,
the text field, and the bytes of the tokenizer's tokenizer.json and tokenizer_config.json (the
special tokens torchtitan adds come from the latter). Entries live in
$FORENSICS_CACHE/torchtitan (default ~/.cache/forensics/torchtitan); an unreadable or misshapen
entry is ignored and rebuilt, never trusted.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from dataloaders.atomic import write_bytes_atomic
from dataloaders.cache_dir import forensics_cache
from dataloaders.errors import ForensicsError


def _file_hash(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def inputs_key(source: Any, tokenizer: Any) -> str:
    """Hex key of a source's token counts (module docstring)."""
    payload = {
        "shards": [[str(s.path), s.size, s.path.stat().st_mtime_ns] for s in source.shards],
        "builder": source.builder,
        "text_field": source.spec.text_field,
        "tokenizer": _file_hash(tokenizer.json_path),
        "tokenizer_config": _file_hash(tokenizer.config_path),
        "layout": 1,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]


def load_inputs(key: str, n_docs: int) -> np.ndarray | None:
    """The cached counts, or None (missing, unreadable, or not n_docs long)."""
    try:
        counts = np.load(forensics_cache("torchtitan") / f"{key}.npy", allow_pickle=False)
    except (OSError, ValueError):
        return None
    if counts.dtype != np.int64 or counts.shape != (n_docs,):
        return None
    return counts


def save_inputs(key: str, counts: np.ndarray) -> None:
    """Store the counts; a failure to write (read-only home, full disk) only costs speed."""
    buffer = io.BytesIO()
    np.save(buffer, counts.astype(np.int64), allow_pickle=False)
    try:
        folder = forensics_cache("torchtitan")
        folder.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(folder / f"{key}.npy", buffer.getvalue())
    except (OSError, ForensicsError):
        return
