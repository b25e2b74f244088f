"""Documents of a list of data files by doc_id, the row number over the files in order (the index
of the row in a map-style Dataset of the files): the file and row that hold each, and their file
name, provenance fields and text as the files' readers (rows.py) give them.

Shared by the families that read their files with this package's readers: Hugging Face
`datasets` runs (replayer.py) and each source of a torchtitan run (dataloaders/torchtitan).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from dataloaders.errors import ForensicsError
from dataloaders.hf import rows
from dataloaders.hf.shards import Shard

FILE_FACET = "file"  # the facet naming the file a document is in


def locate(offsets: np.ndarray, doc_ids: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    """doc_id -> (file index, row in the file); `offsets`: each file's first doc_id, plus the
    total. An id outside the files is a ForensicsError naming the dataset `name`."""
    if len(doc_ids) and (doc_ids.min() < 0 or doc_ids.max() >= offsets[-1]):
        raise ForensicsError(f"doc_id outside 0..{offsets[-1] - 1} for {name}")
    shard = np.searchsorted(offsets, doc_ids, side="right") - 1
    return shard, doc_ids - offsets[shard]


def doc_info(
    shards: Sequence[Shard],
    builder: str,
    offsets: np.ndarray,
    doc_ids: np.ndarray,
    *,
    name: str,
    provenance_fields: Sequence[str],
    text_field: str,
    text: bool,
) -> pl.DataFrame:
    """doc_id, file, the provenance fields (and, with `text`, the text as `text`) of the given
    documents of `shards` (read with `builder`; `offsets` and `name` as for `locate`)."""
    doc_ids = np.asarray(doc_ids, dtype=np.int64)
    shard, row = locate(offsets, doc_ids, name)
    columns = [f for f in provenance_fields if f != FILE_FACET]
    if text:
        columns.append(text_field)
    frames = []
    for idx in np.unique(shard):
        mask = shard == idx
        part = pl.DataFrame({"doc_id": doc_ids[mask], FILE_FACET: shards[idx].name})
        if columns:
            read = rows.read_rows(shards[idx], builder, row[mask], columns)
            part = pl.concat([part, read.drop("row")], how="horizontal")
        frames.append(part)
    schema = {"doc_id": pl.Int64, FILE_FACET: pl.Utf8, **{c: pl.Utf8 for c in columns}}
    if not frames:
        return pl.DataFrame(schema=schema)
    frame = pl.concat(frames).cast(schema)  # type: ignore[arg-type]
    if text and text_field != "text":
        frame = frame.rename({text_field: "text"})
    return frame
