"""A checked provenance manifest as an Arrow IPC file in our cache, read through a memory map.

A production corpus's manifests (a row per document: source, crawl batch, domain, url) are
hundreds of MB in memory, and every process that replays or decodes (the driver and each
engine worker) needs them. Held as DataFrames that is hundreds of MB per process. Written once
per version of the manifest (and of the `.idx` it was checked against) as an uncompressed Arrow
IPC file and mapped read-only, the processes share the kernel's page cache instead, read only
the rows they gather, and hand the pages back after each part (dataloaders.mapped_pages).

Strings are written as Arrow `large_string` (polars' oldest IPC level): Arrow's `take`, which
gathers the rows, has no kernel for string views.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.ipc as ipc

from dataloaders.atomic import atomic_path
from dataloaders.cache_dir import forensics_cache
from dataloaders.mapped_pages import release_map, release_pages, tracked
from dataloaders.megatron.checked import checked_once, versions

# Bytes of the map a stretch of a gather spans (its rows' ids, from first to last, times the
# file's bytes per row) between hand-backs of its pages: what one gather holds resident.
STRETCH_BYTES = 256 * 2**20


class MappedManifest:
    """One dataset's manifest (facet columns, and `doc_hash` where it has one), a row per
    document in .idx order, over a memory-mapped Arrow IPC file."""

    def __init__(self, path: Path | None = None, table: pl.DataFrame | None = None) -> None:
        if path is not None:
            with open(path, "rb") as fh:
                self._map = tracked(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ))
            self._table = ipc.open_file(pa.py_buffer(self._map)).read_all()
        else:  # held in memory: our cache could not take the copy
            assert table is not None
            self._table = table.to_arrow(compat_level=pl.CompatLevel.oldest())
        self.mapped = path is not None
        # the record batches (the file's, or the held table's chunks) and each one's first row
        self._batches = self._table.to_batches()
        lengths = [b.num_rows for b in self._batches]
        self._starts = np.cumsum([0, *lengths[:-1]], dtype=np.int64)
        self.columns = [c for c in self._table.column_names if c != "doc_hash"]
        self.has_hash = "doc_hash" in self._table.column_names

    @property
    def height(self) -> int:
        return self._table.num_rows

    def gather(self, columns: list[str], rows: np.ndarray) -> pl.DataFrame:
        """`columns` of the documents `rows` (doc ids), in that order.

        Each record batch is taken from on its own (`_take_sorted`): Arrow's `take` on a column
        of several chunks first concatenates them, which for a string column is a copy of the
        whole column (and a read of every page of it) however few rows are asked for. From
        the map, the rows are read in ascending order, a stretch at a time, each stretch's
        pages handed back before the next. A stretch is cut by the span of its rows' ids, not
        by their number: each read maps the page cache's pages around it, so a few thousand
        rows scattered over a manifest of millions would map most of the file, while the
        pages a stretch can touch lie in its span, `STRETCH_BYTES` of the file at most
        (`stretches`)."""
        rows = np.asarray(rows, dtype=np.int64)
        if len(rows) and (rows.min() < 0 or rows.max() >= self.height):
            raise IndexError(f"doc ids outside the manifest's {self.height:,} rows")
        schema = self._table.select(columns).schema
        order = np.argsort(rows, kind="stable")
        ordered = rows[order]
        span = self.span_rows if self.mapped else max(1, self.height)
        parts: list[pa.RecordBatch] = []
        for start, end in stretches(ordered, span):
            parts.extend(_take_sorted(self._batches, self._starts, ordered[start:end], columns))
            if self.mapped:
                release_map(self._map)
        taken = pl.from_arrow(pa.Table.from_batches(parts, schema=schema))
        assert isinstance(taken, pl.DataFrame)
        back = np.empty_like(order)
        back[order] = np.arange(len(order))
        return taken[back] if len(back) else taken

    @property
    def span_rows(self) -> int:
        """Rows of the manifest whose share of the file is STRETCH_BYTES."""
        return max(1, STRETCH_BYTES * self.height // max(1, len(self._map)))

    def sums_by(self, name: str, values: np.ndarray) -> pl.DataFrame:
        """key (each value of column `name`, null for documents without one), total (the sum
        of `values`, one per document, over the documents with that key): through Arrow's
        dictionary encoding of the mapped column, so no string is copied per document."""
        column = self._table.column(name)
        encoded = column.chunk(0).dictionary_encode() if column.num_chunks == 1 else (
            column.combine_chunks().dictionary_encode()
        )  # fmt: skip
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        keys = encoded.dictionary.to_pylist()
        missing = np.isnan(codes) if codes.dtype.kind == "f" else np.zeros(len(codes), bool)
        codes = np.where(missing, len(keys), codes).astype(np.int64)
        totals = np.bincount(codes, weights=values, minlength=len(keys) + 1)
        present = np.bincount(codes, minlength=len(keys) + 1) > 0
        frame = pl.DataFrame(
            {"key": [*keys, None], "total": totals},
            schema={"key": pl.Utf8, "total": pl.Float64},
        )
        release_pages()  # every page of the column was read
        return frame.filter(pl.Series(present))

    def column(self, name: str) -> pl.Series:
        """A whole column (a copy: for a pass over every document, such as the documents of one
        crawl batch)."""
        column = pl.from_arrow(self._table.column(name)).alias(name)  # type: ignore[union-attr]
        release_pages()  # every page of the column was read
        return column


def _take_sorted(
    batches: list[pa.RecordBatch], starts: np.ndarray, ordered: np.ndarray, columns: list[str]
) -> list[pa.RecordBatch]:
    """`columns` of the rows `ordered` (ascending ids over the whole table), taken from the
    record batches that hold them, each with its own row numbers: one take per batch touched."""
    which = np.searchsorted(starts, ordered, side="right") - 1
    cuts = (np.flatnonzero(np.diff(which)) + 1).tolist()
    return [
        batches[int(which[lo])].select(columns).take(pa.array(ordered[lo:hi] - starts[which[lo]]))
        for lo, hi in zip([0, *cuts], [*cuts, len(ordered)], strict=True)
        if hi > lo
    ]


def stretches(ordered: np.ndarray, span: int) -> list[tuple[int, int]]:
    """[start, end) bounds cutting ascending row ids `ordered` where they cross a multiple of
    `span`: each stretch's ids lie within `span` consecutive rows."""
    if len(ordered) == 0:
        return [(0, 0)]
    cuts = (np.flatnonzero(np.diff(ordered // span)) + 1).tolist()
    return list(zip([0, *cuts], [*cuts, len(ordered)], strict=True))


def mapped_manifest(path: Path, idx_file: Path, load: Callable[[], pl.DataFrame]) -> MappedManifest:
    """The manifest at `path`, checked by `load()` (load_manifest against the dataset's `.idx`:
    it raises on a bad manifest) once per version of both files, mapped from our cache (held in
    memory where the cache cannot be written)."""
    files = [Path(path), Path(idx_file)]
    name = json.dumps([[os.path.realpath(f) for f in files], versions(files)])
    target = forensics_cache("megatron", "manifests") / (
        hashlib.md5(name.encode(), usedforsecurity=False).hexdigest() + ".arrow"
    )

    def write() -> dict[str, str]:
        table = load()
        target.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(target) as tmp:
            table.rechunk().write_ipc(  # one record batch: a column is one array when mapped
                tmp, compression="uncompressed", compat_level=pl.CompatLevel.oldest()
            )
        return {"file": str(target)}

    try:
        checked_once("manifest-arrow", files, write)
        if not target.is_file():  # stamped, then removed from the cache: checked, written again
            write()
    except OSError:  # a read-only or full cache: the checked manifest held in memory instead
        return MappedManifest(table=load())
    return MappedManifest(target)
