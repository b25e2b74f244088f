"""On-disk cache of a streaming run's order, one Parquet file per segment (an epoch, or the rest
of an epoch after a resume), so a second `forensics spike` does not shuffle the epochs again.

The key hashes the config's data and training sections, the transcription's version and every
stream's index.json hash and shard sizes (a rewritten shard fails open_stream before any lookup).
Entries live in $FORENSICS_CACHE/mosaic (default ~/.cache/forensics/mosaic); an unreadable entry
is ignored and rebuilt, never trusted; a failure to write only costs speed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import polars as pl

from dataloaders.atomic import write_json_atomic, write_parquet_atomic
from dataloaders.cache_dir import forensics_cache

LAYOUT = 2  # bump when the transcription or the table layout changes


def cache_root() -> Path:
    return forensics_cache("mosaic")


def run_key(config: Any, streams: list[dict[str, Any]]) -> str:
    payload = {
        "data": config.data.model_dump(mode="json"),
        "training": config.training.model_dump(mode="json"),
        "streams": streams,
        "layout": LAYOUT,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]


def load_segment(key: str, segment: int) -> pl.DataFrame | None:
    try:
        return pl.read_parquet(cache_root() / f"{key}.seg{segment}.parquet")
    except (OSError, pl.exceptions.PolarsError):
        return None


def save_segment(key: str, segment: int, frame: pl.DataFrame) -> None:
    folder = cache_root()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_parquet_atomic(frame, folder / f"{key}.seg{segment}.parquet")
    except OSError:
        return


def load_sizes(key: str) -> list[dict[str, Any]] | None:
    """The run's segments (epoch, sample_in_epoch, initial_physical_nodes, first, sizes)."""
    try:
        return json.loads((cache_root() / f"{key}.segments.json").read_text())
    except (OSError, ValueError):
        return None


def save_sizes(key: str, segments: list[dict[str, Any]]) -> None:
    folder = cache_root()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(folder / f"{key}.segments.json", segments)
    except OSError:
        return
