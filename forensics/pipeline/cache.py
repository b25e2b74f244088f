"""Stage outputs cached on disk, named by a hash of everything the stage depends on.

A rerun with other cheap options (a threshold, `--after`) reads the expensive stages back; a
change to any input (config, data fingerprint, window, scorer source) gives another key, so a
stale table is never read. A damaged cache file is recomputed, never trusted.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from dataloaders.atomic import write_parquet_atomic


def cache_key(**parts: Any) -> str:
    """A short stable hash of a stage's inputs (JSON of the parts, keys sorted)."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def cached_table(
    path: Path, compute: Callable[[], pl.DataFrame], hits: dict[str, bool], name: str
) -> pl.DataFrame:
    """Read `path` if a previous run wrote it, else compute and write it atomically.

    `hits[name]` records whether the table came from the cache (reported by `spike --timings`
    and asserted by the tests that a cheap rerun redoes only the cheap end)."""
    if path.is_file():
        try:
            table = pl.read_parquet(path)
            hits[name] = True
            return table
        except Exception:  # a damaged cache file is recomputed, never trusted
            pass
    table = compute()
    write_parquet_atomic(table, path)
    hits[name] = False
    return table


def module_version(package: str) -> str:
    """A hash of a package's source files: cached scores are redone when the scorer changes,
    a benchmark run is rebuilt when its builder changes."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return "0"
    digest = hashlib.sha256()
    for root in spec.submodule_search_locations:
        for path in sorted(Path(root).rglob("*.py")):
            digest.update(path.read_bytes())
    return digest.hexdigest()[:8]
