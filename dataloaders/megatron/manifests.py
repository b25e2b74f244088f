"""Provenance manifests: the facets (source, url, crawl batch, ...) of every document of a run.

Why apart from the replay: the replay says which documents an iteration drew; the manifests say
what those documents are, which is what the blame names and the block list is cut by. A
manifest is a Parquet table written by `forensics manifest` from the JSONL the data was
tokenised from, one row per document in .idx order; it is found through the config, else as
`<prefix>.manifest.parquet` beside the data, read on first use and checked against the .idx.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from dataloaders.base import RESERVED_COLUMNS
from dataloaders.errors import ForensicsError
from dataloaders.megatron.indexed import IndexedDataset


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


class Manifests:
    """The manifests of a run's datasets (`specs`: display name -> blend spec), by name."""

    def __init__(self, specs: dict[str, Any], datasets: dict[Path, IndexedDataset]) -> None:
        self.specs = specs
        self.datasets = datasets
        self._tables: dict[str, pl.DataFrame | None] = {}

    @property
    def facets(self) -> list[str]:
        """Every facet column of any dataset's manifest, in dataset then column order."""
        out: list[str] = []
        for name in self.specs:
            table = self.table(name)
            for col in table.columns if table is not None else []:
                if col not in out:
                    out.append(col)
        return out

    def table(self, name: str) -> pl.DataFrame | None:
        """Dataset `name`'s facets, one row per document in .idx order; None without a manifest
        (the config's, else `<prefix>.manifest.parquet` beside the data)."""
        if name not in self._tables:
            spec = self.specs[name]
            path = spec.manifest
            if path is None:
                default = Path(f"{spec.prefix}.manifest.parquet")
                path = default if default.is_file() else None
            ds = self.datasets[spec.prefix]
            self._tables[name] = None if path is None else load_manifest(path, ds.num_documents)
        return self._tables[name]

    def attach(self, table: pl.DataFrame) -> pl.DataFrame:
        """`table` (dataset, doc_id, ...) with a Utf8 column per facet (null where its dataset has
        no manifest or no such column)."""
        facets = self.facets
        if not facets:
            return table
        columns: dict[str, np.ndarray] = {
            f: np.full(table.height, None, dtype=object) for f in facets
        }
        names = table["dataset"].to_numpy()
        docs = table["doc_id"].to_numpy()
        for name in np.unique(names):
            manifest = self.table(str(name))
            if manifest is None:
                continue
            where = np.flatnonzero(names == name)
            for col in manifest.columns:
                columns[col][where] = manifest[col].gather(docs[where]).to_numpy()
        return table.with_columns(
            [pl.Series(f, columns[f].tolist(), dtype=pl.Utf8) for f in facets]
        )

    def documents_with(self, facet: str, key: str | None) -> pl.DataFrame:
        """Every document of the run whose `facet` is `key` (None: the facet has no value), as
        dataset, doc_id, whether or not a window drew it: a blamed crawl batch's documents that
        come later in the run belong in the block list. facet "dataset": the whole dataset."""
        frames = []
        for name, spec in self.specs.items():
            if facet == "dataset":
                if key != name:
                    continue
                n = self.datasets[spec.prefix].num_documents
                doc_ids = pl.Series("doc_id", np.arange(n, dtype=np.int64))
            else:
                manifest = self.table(name)
                if manifest is None or facet not in manifest.columns:
                    continue
                column = pl.col(facet).cast(pl.Utf8)
                match = column.is_null() if key is None else column == key
                # load_manifest keeps the facets in .idx order: the row number is the doc_id
                doc_ids = pl.Series(
                    "doc_id", np.flatnonzero(manifest.select(match.fill_null(False)).to_series())
                )
            frames.append(
                doc_ids.to_frame("doc_id").select(pl.lit(name).alias("dataset"), "doc_id")
            )
        if not frames:
            return pl.DataFrame(schema={"dataset": pl.Utf8, "doc_id": pl.Int64})
        return pl.concat(frames)
