"""Provenance manifests of Megatron datasets: one row per document, in .idx order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from dataloaders.base import RESERVED_COLUMNS
from dataloaders.errors import ForensicsError


def load_manifest(path: Path, num_documents: int) -> pl.DataFrame:
    """A provenance manifest: one row per document in .idx order, doc_id 0..n-1, string facets."""
    if not path.is_file():
        raise ForensicsError(f"{path}: manifest not found")
    try:
        table = pl.read_parquet(path)
    except Exception as err:  # polars raises several types for a non-Parquet file
        raise ForensicsError(f"{path}: not a readable Parquet manifest ({err})") from None
    if "doc_id" not in table.columns:
        raise ForensicsError(f"{path}: manifest has no doc_id column")
    if table.height != num_documents:
        raise ForensicsError(
            f"{path}: manifest has {table.height} rows but the dataset has {num_documents} "
            "documents (one row per document, in .idx order)"
        )
    table = table.sort("doc_id")
    ids = table["doc_id"].to_numpy()
    if not np.array_equal(ids, np.arange(num_documents)):
        raise ForensicsError(f"{path}: manifest doc_id must be 0..{num_documents - 1}, each once")
    facets = [c for c in table.columns if c != "doc_id"]
    clash = sorted(set(facets) & RESERVED_COLUMNS)
    if clash:
        raise ForensicsError(
            f"{path}: manifest column {', '.join(repr(c) for c in clash)} would replace the "
            "replay table's own; rename it (e.g. source_dataset)"
        )
    try:
        return table.select([pl.col(c).cast(pl.Utf8) for c in facets])
    except pl.exceptions.PolarsError as err:
        raise ForensicsError(
            f"{path}: manifest columns must be strings ({str(err).splitlines()[0]})"
        ) from None
