"""On-disk cache of a Hugging Face run's order, so a second `forensics spike` does not stream the
whole run again.

The key hashes everything the order depends on: the config's data and training sections, the
installed `datasets` version, and every shard's path, size and mtime (a rewritten shard misses
the cache). Entries live in $FORENSICS_CACHE/hf (default ~/.cache/forensics/hf); a corrupt or
unreadable entry is ignored and rebuilt, never trusted.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from dataloaders.atomic import write_parquet_atomic
from dataloaders.cache_dir import forensics_cache


def cache_root() -> Path:
    return forensics_cache("hf")


def plan_key(config: Any, shards: list[Any], datasets_version: str) -> str:
    """Hex key of the run's order (see module docstring for what goes in)."""
    payload = {
        "data": config.data.model_dump(mode="json"),
        "training": config.training.model_dump(mode="json"),
        "tokenizer": str(config.tokenizer) if config.tokenizer else None,
        "datasets": datasets_version,
        "shards": [[str(s.path), s.size, s.path.stat().st_mtime_ns] for s in shards],
        "layout": 1,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]


def load_plan(key: str) -> tuple[pl.DataFrame, pl.DataFrame | None, np.ndarray] | None:
    """(steps, segments or None, shard offsets) from the cache, or None."""
    folder = cache_root()
    try:
        steps = pl.read_parquet(folder / f"{key}.steps.parquet")
        offsets = pl.read_parquet(folder / f"{key}.offsets.parquet")["offset"].to_numpy()
        seg_path = folder / f"{key}.segments.parquet"
        segments = pl.read_parquet(seg_path) if seg_path.is_file() else None
    except (OSError, pl.exceptions.PolarsError):
        return None
    return steps, segments, np.asarray(offsets, dtype=np.int64)


def save_plan(
    key: str, steps: pl.DataFrame, segments: pl.DataFrame | None, offsets: np.ndarray
) -> None:
    """Store the order; a failure to write (read-only home, full disk) only costs speed."""
    folder = cache_root()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if segments is not None:
            write_parquet_atomic(segments, folder / f"{key}.segments.parquet")
        write_parquet_atomic(pl.DataFrame({"offset": offsets}), folder / f"{key}.offsets.parquet")
        write_parquet_atomic(steps, folder / f"{key}.steps.parquet")  # last: marks it complete
    except OSError:
        return
