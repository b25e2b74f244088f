"""Where documents sit in a document table, found by binary search rather than a join.

A side's document table (window or baseline) holds a row per distinct document, sorted by
(dataset, doc_id), as the spike builds every side. At production scale that is tens of
millions of rows, and a join against it (the keys of a few hundred thousand scored documents,
or of every replay segment) builds a hash table of all of them: gigabytes for a moment.
`positions_in` instead searches each dataset's sorted ids; a table that is not so sorted is
joined as before.
"""

from __future__ import annotations

import numpy as np
import polars as pl


def _dataset_spans(table: pl.DataFrame) -> dict[str | None, tuple[int, int]]:
    """(first row, rows) of each dataset's run of rows, in the table's order."""
    counts = table.group_by("dataset", maintain_order=True).len()
    lengths = counts["len"].to_numpy().astype(np.int64)
    starts = np.cumsum(lengths) - lengths
    return dict(zip(counts["dataset"].to_list(), zip(starts.tolist(), lengths.tolist(),
                                                     strict=True), strict=True))  # fmt: skip


def positions_in(table: pl.DataFrame, keys: pl.DataFrame) -> np.ndarray:
    """Each row of `keys` (dataset, doc_id): its row in `table`, or -1 where the table lacks
    it (int64). Binary search per dataset where the table is sorted by (dataset, doc_id)
    with each document once; otherwise a join (the first row of a document held twice)."""
    spans = _dataset_spans(table)
    ids = {name: table["doc_id"].slice(start, length).to_numpy()
           for name, (start, length) in spans.items()}  # fmt: skip
    runs = table.select(pl.col("dataset").rle_id().max()).item()
    if (runs is not None and runs + 1 != len(spans)) or any(
        len(v) and not np.all(np.diff(v) > 0) for v in ids.values()
    ):
        return _positions_by_join(table, keys)
    out = np.full(keys.height, -1, dtype=np.int64)
    wanted_ids = keys["doc_id"].cast(pl.Int64).to_numpy()
    names = keys["dataset"].cast(pl.Utf8)
    for name, (start, length) in spans.items():
        where = np.flatnonzero(names.eq_missing(name).to_numpy())
        if not len(where) or not length:
            continue
        wanted = wanted_ids[where]
        at = np.minimum(np.searchsorted(ids[name], wanted), length - 1)
        hit = ids[name][at] == wanted
        out[where[hit]] = start + at[hit]
    return out


def _positions_by_join(table: pl.DataFrame, keys: pl.DataFrame) -> np.ndarray:
    rows = (
        table.select(pl.col("dataset").cast(pl.Utf8), pl.col("doc_id").cast(pl.Int64))
        .with_row_index("_at")
        .unique(["dataset", "doc_id"], keep="first", maintain_order=True)
    )
    found = keys.select(pl.col("dataset").cast(pl.Utf8), pl.col("doc_id").cast(pl.Int64)).join(
        rows, on=["dataset", "doc_id"], how="left", maintain_order="left", nulls_equal=True
    )
    return found["_at"].cast(pl.Int64).fill_null(-1).to_numpy()
