"""Memory-mapped data files, and the pages a finished piece of work hands back.

The loaders read token files and shards through memory maps, as their libraries do (Megatron's
`IndexedDataset`, OLMo-core's numpy memmaps, MosaicML's shards). Every page a process touches
stays in its resident set until the map is closed: a worker that decodes documents spread over a
30 GB corpus, part after part, ends up "holding" gigabytes of page cache, and a process tree of
such workers reads as many times the memory it needs. The pages are the kernel's file cache, not
the process's, so nothing is lost by dropping them from the map: `release_pages` tells the
kernel (madvise MADV_DONTNEED on each live map; the file stays mapped and a later read faults
the page back in from the cache). Callers release after each unit of work (a replay part, a
decode+score part, a stage reading token ids).
"""

from __future__ import annotations

import functools
import mmap
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np
import polars as pl

# np.memmap and mmap.mmap objects by id (an ndarray is not hashable: no WeakSet)
_LIVE: dict[int, weakref.ref[Any]] = {}
F = TypeVar("F", bound=Callable[..., Any])


def tracked(mapping: Any) -> Any:
    """`mapping` (an np.memmap or an mmap.mmap), remembered for `release_pages`."""
    key = id(mapping)
    _LIVE[key] = weakref.ref(mapping, lambda _: _LIVE.pop(key, None))
    return mapping


def memmap(path: Any, dtype: Any, shape: tuple[int, ...] | None = None) -> np.memmap:
    """A read-only np.memmap of `path`, tracked."""
    return tracked(np.memmap(path, mode="r", dtype=dtype, shape=shape))


def release_pages() -> None:
    """Drop every tracked map's pages from this process's resident set (they stay in the
    kernel's page cache)."""
    for ref in list(_LIVE.values()):
        mapping = ref()
        if mapping is not None:
            release_map(mapping)


def release_map(mapping: Any) -> None:
    """Drop one map's pages (an np.memmap or an mmap.mmap) from the resident set: for a reader
    that hands back its own pages as it goes, leaving the other maps' to their readers."""
    raw = mapping._mmap if isinstance(mapping, np.memmap) else mapping
    if isinstance(raw, mmap.mmap) and not raw.closed:
        try:
            raw.madvise(mmap.MADV_DONTNEED)
        except (OSError, ValueError):  # a platform without it, or an empty map
            pass


def releasing_pages(function: F) -> F:
    """`function`, then `release_pages` (also when it raises)."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        finally:
            release_pages()

    return wrapper  # type: ignore[return-value]


RELEASE_ROWS = 4_096  # documents read between releases: a few hundred MB of mapped pages at most


def released_chunks(table: pl.DataFrame, rows: int = RELEASE_ROWS) -> Iterator[pl.DataFrame]:
    """`table` in slices of `rows`, the pages released after each: for a loop that reads the
    token ids of many documents spread over the files (each read maps its neighbours too)."""
    for start in range(0, table.height, rows):
        yield table.slice(start, rows)
        release_pages()
