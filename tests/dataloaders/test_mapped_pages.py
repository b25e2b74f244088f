"""Memory-mapped files hand their pages back (dataloaders.mapped_pages): what keeps a worker
that decodes documents spread over a corpus from holding the corpus in its resident set."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import polars as pl

from dataloaders.mapped_pages import _LIVE, memmap, release_pages, released_chunks


def _mapped_kb(path: Path) -> int:
    """Resident kB of this process's mappings of `path` (Linux /proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and ":" not in fields[0]:
            inside = len(fields) > 5 and fields[5] == str(path)
        elif inside and line.startswith("Rss:"):
            total += int(fields[1])
    return total


def test_release_drops_the_pages_and_the_map_still_reads(tmp_path: Path) -> None:
    data = np.arange(8 << 20, dtype=np.uint16)  # 16 MB
    path = tmp_path / "tokens.bin"
    data.tofile(path)
    mapped = memmap(path, np.uint16)
    assert int(mapped[::512].astype(np.int64).sum()) == int(data[::512].astype(np.int64).sum())
    assert _mapped_kb(path) > 8_000  # every page touched
    release_pages()
    assert _mapped_kb(path) < 1_000
    assert int(mapped[12345]) == 12345  # read again from the page cache


def test_a_map_gone_is_forgotten(tmp_path: Path) -> None:
    path = tmp_path / "tokens.bin"
    np.zeros(4096, np.uint16).tofile(path)
    gc.collect()  # maps other tests left in cycles go now, not during this test
    mapped = memmap(path, np.uint16)
    key = id(mapped)
    assert _LIVE[key]() is mapped
    del mapped
    gc.collect()
    assert key not in _LIVE
    release_pages()  # nothing left to release: no error


def test_released_chunks_cover_the_table_in_order() -> None:
    table = pl.DataFrame({"doc_id": np.arange(10_000)})
    chunks = list(released_chunks(table, rows=4_096))
    assert [c.height for c in chunks] == [4_096, 4_096, 1_808]
    assert pl.concat(chunks).equals(table)
