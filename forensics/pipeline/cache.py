"""Stage outputs cached on disk, named by a hash of everything the stage depends on.

A rerun with other cheap options (a threshold, `--after`) reads the expensive stages back; a
change to any input (config, data fingerprint, window, scorer source) gives another key, so a
stale table is never read. A damaged cache file is recomputed, never trusted.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import io
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from dataloaders.atomic import write_bytes_atomic, write_parquet_atomic

FLOAT_DIGITS = 12  # significant digits of a float in content_digest


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


def cached_file(
    path: Path, write: Callable[[Path], None], hits: dict[str, bool], name: str
) -> pl.DataFrame:
    """`cached_table` for a stage that writes its table itself (streamed, in parts): read
    `path` if a previous run wrote it, else `write(path)` (atomically) and read it back."""
    if path.is_file():
        try:
            table = pl.read_parquet(path)
            hits[name] = True
            return table
        except Exception:  # a damaged cache file is rewritten, never trusted
            path.unlink(missing_ok=True)
    write(path)
    hits[name] = False
    return pl.read_parquet(path)


def cached_scan(
    path: Path, write: Callable[[Path], None], hits: dict[str, bool], name: str
) -> pl.LazyFrame:
    """`cached_file` for a table the caller reads lazily (never held whole): a scan of `path`
    if a previous run wrote it (its footer readable), else of what `write(path)` wrote."""
    if path.is_file():
        try:
            pl.read_parquet_schema(path)
            hits[name] = True
            return pl.scan_parquet(path)
        except Exception:  # a damaged cache file is rewritten, never trusted
            path.unlink(missing_ok=True)
    write(path)
    hits[name] = False
    return pl.scan_parquet(path)


# Rows of a frame hashed at a time: a row's hash does not depend on the others, so the digest
# is the same for any slicing, and a window's replay rows (tens of millions) are never copied
# whole (their rounded floats, their hashes).
DIGEST_ROWS = 1 << 20


def content_digest(*values: Any) -> str:
    """A sha256 of values as they are: polars frames (schema and rows, in order), dataclasses,
    dicts, lists, numbers and strings, nested. Two values with the same digest render the same
    output, so it keys outputs computed from tables that live only in memory (the report's).

    Floats count to FLOAT_DIGITS significant digits: sums whose order varies from run to run
    (polars' parallel group_by) differ in their last bits, which no rendering shows."""
    digest = hashlib.sha256()
    _feed(digest, list(values))
    return digest.hexdigest()[:16]


def _feed(digest: Any, value: Any) -> None:
    """One value into the hash, each kind tagged so that no two kinds can collide."""
    if isinstance(value, pl.DataFrame):
        digest.update(b"F" + str(value.schema).encode() + str(value.height).encode())
        floats = pl.col(pl.Float32, pl.Float64).round_sig_figs(FLOAT_DIGITS)
        for start in range(0, value.height if value.width else 0, DIGEST_ROWS):
            digest.update(_frame_bytes(value.slice(start, DIGEST_ROWS).with_columns(floats)))
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        digest.update(b"D" + type(value).__qualname__.encode())
        for f in dataclasses.fields(value):
            _feed(digest, (f.name, getattr(value, f.name)))
    elif isinstance(value, dict):
        digest.update(b"M%d" % len(value))
        for k in sorted(value, key=str):
            _feed(digest, (str(k), value[k]))
    elif isinstance(value, (list, tuple)):
        digest.update(b"L%d" % len(value))
        for item in value:
            _feed(digest, item)
    elif isinstance(value, float):
        digest.update(b"R" + f"{value:.{FLOAT_DIGITS}g}".encode())
    else:
        digest.update(b"V" + json.dumps(value, default=str).encode())


def _frame_bytes(frame: pl.DataFrame) -> bytes:
    """The rows' hashes (polars' row hash, a fixed seed: stable within a polars version, which
    the callers key too; blind to how the columns are laid out in memory, chunks, slices and
    what lies under a null), or the Arrow IPC bytes where a column type has no row hash."""
    try:
        return frame.hash_rows(seed=0).to_numpy().tobytes()
    except Exception:  # noqa: BLE001 - any type polars cannot hash is serialised instead
        buffer = io.BytesIO()
        frame.write_ipc(buffer, compression="uncompressed")
        return buffer.getvalue()


def cached_bytes(path: Path, compute: Callable[[], bytes | None]) -> bytes | None:
    """`path`'s bytes when an earlier run wrote them, else compute and write them atomically
    (None, nothing to write, is not cached). An unreadable file is recomputed."""
    try:
        data = path.read_bytes()
        os.utime(path)  # recently used: kept by keep_latest
        return data
    except OSError:
        pass
    data = compute()
    if data is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_bytes_atomic(path, data)
        except OSError:
            pass  # a read-only cache: the next run renders again
    return data


def keep_latest(folder: Path, pattern: str, keep: int) -> None:
    """Delete all but the `keep` most recently used files matching `pattern` in `folder`."""
    try:
        found = sorted(folder.glob(pattern), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    except OSError:
        return
    for stale in found[keep:]:
        stale.unlink(missing_ok=True)


def module_version(package: str) -> str:
    """A hash of a package's source files: cached scores are redone when the scorer changes,
    a benchmark run is rebuilt when its builder changes. Kept per process while no file's
    size or mtime changes (one stat per file instead of reading them all)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return "0"
    paths = sorted(
        Path(folder, name)
        for root in spec.submodule_search_locations
        for folder, _, names in os.walk(root)
        for name in names
        if name.endswith(".py")
    )
    stats = tuple((str(p), *_size_mtime(p)) for p in paths)
    known = _VERSIONS.get(package)
    if known is not None and known[0] == stats:
        return known[1]
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    _VERSIONS[package] = (stats, digest.hexdigest()[:8])
    return _VERSIONS[package][1]


def _size_mtime(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


_VERSIONS: dict[str, tuple[tuple, str]] = {}  # package -> (its files' stats, module_version)
