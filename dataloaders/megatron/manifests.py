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
from dataloaders.megatron.manifest_map import MappedManifest, mapped_manifest

# The columns that tie a manifest row to its document (written by `forensics manifest --prefix`):
#   doc_tokens  int64   the document's token count in the .idx (all its sequences)
#   doc_hash    utf8    blake2b-64 (hex) of the document's token ids as little-endian int64
# Not facets: checked when the manifest is read (doc_tokens, every row) and when a document's
# facets are attached to a replay (doc_hash, the documents drawn).
CHECK_COLUMNS = ("doc_tokens", "doc_hash")


def document_hash(dataset: IndexedDataset, doc: int) -> str:
    """doc_hash of document `doc`: its ids as int64, so the storage dtype does not change it."""
    import hashlib

    digest = hashlib.blake2b(digest_size=8)
    for seq in range(int(dataset.document_indices[doc]), int(dataset.document_indices[doc + 1])):
        digest.update(np.asarray(dataset[seq], dtype="<i8").tobytes())
    return digest.hexdigest()


def document_checks(dataset: IndexedDataset) -> pl.DataFrame:
    """doc_tokens and doc_hash of every document of `dataset`, in .idx order."""
    return pl.DataFrame(
        {
            "doc_tokens": pl.Series(dataset.document_token_counts(), dtype=pl.Int64),
            "doc_hash": pl.Series(
                [document_hash(dataset, d) for d in range(dataset.num_documents)], dtype=pl.Utf8
            ),
        }
    )


def load_manifest(
    path: Path, num_documents: int, token_counts: np.ndarray | None = None
) -> pl.DataFrame:
    """A provenance manifest: one row per document in .idx order, doc_id 0..n-1, string facets
    (plus doc_hash when the manifest has it). With `token_counts` (the .idx's), a manifest with
    doc_tokens must agree with every document: rows moved, or a manifest of other data with
    the same count, are refused."""
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
    try:
        table = table.sort("doc_id")
    except pl.exceptions.PolarsError as err:
        raise ForensicsError(f"{path}: doc_id not sortable ({str(err).splitlines()[0]})") from None
    ids = table["doc_id"].to_numpy()
    if not np.array_equal(ids, np.arange(num_documents)):
        raise ForensicsError(f"{path}: manifest doc_id must be 0..{num_documents - 1}, each once")
    if token_counts is not None and "doc_tokens" in table.columns:
        _check_token_counts(path, table["doc_tokens"], token_counts)
    facets = [c for c in table.columns if c != "doc_id" and c not in CHECK_COLUMNS]
    clash = sorted(set(facets) & RESERVED_COLUMNS)
    if clash:
        raise ForensicsError(
            f"{path}: manifest column {', '.join(repr(c) for c in clash)} would replace the "
            "replay table's own; rename it (e.g. source_dataset)"
        )
    kept = facets + (["doc_hash"] if "doc_hash" in table.columns else [])
    try:
        return table.select([pl.col(c).cast(pl.Utf8) for c in kept])
    except pl.exceptions.PolarsError as err:
        raise ForensicsError(
            f"{path}: manifest columns must be strings ({str(err).splitlines()[0]})"
        ) from None


def _check_token_counts(path: Path, column: pl.Series, token_counts: np.ndarray) -> None:
    """Every row's doc_tokens is its document's token count, or the manifest is refused."""
    try:
        said = column.cast(pl.Int64, strict=True).to_numpy()
    except pl.exceptions.PolarsError:
        raise ForensicsError(f"{path}: doc_tokens must be whole numbers") from None
    off = np.flatnonzero(said != np.asarray(token_counts, dtype=np.int64))
    if off.size:
        i = int(off[0])
        raise ForensicsError(
            f"{path}: the row of doc_id {i} says {said[i]} tokens but document {i} has "
            f"{int(token_counts[i])} ({off.size} rows disagree): its rows are not this "
            "dataset's documents in .idx order (rows moved, or written for other data); "
            "rewrite it with forensics manifest --prefix"
        )


def unchecked_note(path: Path) -> str:
    """Why a manifest without doc_tokens is read with less trust (printed once per manifest)."""
    return (
        f"warning: {path}: has no doc_tokens column (written by an older forensics manifest, or "
        "by hand): its rows are checked against the dataset only by count, so two swapped rows "
        "would go unseen; rewrite it with forensics manifest --prefix --tokenizer"
    )


class Manifests:
    """The manifests of a run's datasets (`specs`: display name -> blend spec), by name."""

    def __init__(self, specs: dict[str, Any], datasets: dict[Path, IndexedDataset]) -> None:
        self.specs = specs
        self.datasets = datasets
        self._tables: dict[str, MappedManifest | None] = {}
        self._paths: dict[str, Path] = {}

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

    def table(self, name: str) -> MappedManifest | None:
        """Dataset `name`'s facets (and doc_hash where it has them), one row per document in
        .idx order, mapped from our cache (manifest_map); None without a manifest (the
        config's, else `<prefix>.manifest.parquet` beside the data)."""
        if name not in self._tables:
            spec = self.specs[name]
            path = spec.manifest
            if path is None:
                default = Path(f"{spec.prefix}.manifest.parquet")
                path = default if default.is_file() else None
            ds = self.datasets[spec.prefix]
            table = None
            if path is not None:
                path = Path(path)

                def load(path: Path = path, ds: IndexedDataset = ds) -> pl.DataFrame:
                    return load_manifest(path, ds.num_documents, ds.document_token_counts())

                table = mapped_manifest(path, ds.idx_file, load)
                self._paths[name] = path
                if not table.has_hash and not _has_column(path, "doc_tokens"):
                    _say_once(unchecked_note(path))
            self._tables[name] = table
        return self._tables[name]

    def check_documents(self, name: str, docs: np.ndarray) -> None:
        """The documents `docs` of dataset `name` hash as its manifest says (doc_hash), or the
        manifest is refused: two swapped rows of equal length pass the token counts."""
        manifest = self.table(name)
        if manifest is None or not manifest.has_hash:
            return
        ds = self.datasets[self.specs[name].prefix]
        unique = np.unique(docs)
        hashes = manifest.gather(["doc_hash"], unique)["doc_hash"].to_list()
        for doc, expected in zip(unique.tolist(), hashes, strict=True):
            if document_hash(ds, int(doc)) != expected:
                raise ForensicsError(
                    f"{self._paths[name]}: the row of doc_id {int(doc)} has another document's "
                    f"doc_hash: its rows are not this dataset's documents in .idx order (rows "
                    "moved, or written for other data); rewrite it with forensics manifest --prefix"
                )

    def attach(self, table: pl.DataFrame) -> pl.DataFrame:
        """`table` (dataset, doc_id, ...) with a Utf8 column per facet (null where its dataset has
        no manifest or no such column). One gather per dataset of its rows, so no Python object
        is made per row (a production window has tens of millions of segment rows) and no copy
        of the manifests is made (a production corpus's are hundreds of MB)."""
        facets = self.facets
        if not facets:
            return table
        names = table["dataset"]
        docs = table["doc_id"].to_numpy()
        found: list[pl.DataFrame] = []
        for name in names.unique(maintain_order=True).drop_nulls().to_list():
            manifest = self.table(str(name))
            if manifest is None:
                continue
            where = np.flatnonzero((names == name).fill_null(False).to_numpy())
            self.check_documents(str(name), docs[where])
            picked = manifest.gather([f for f in facets if f in manifest.columns], docs[where])
            picked = picked.select(
                pl.col(f).cast(pl.Utf8) if f in picked.columns else pl.lit(None, pl.Utf8).alias(f)
                for f in facets
            )
            found.append(picked.with_columns(pl.Series("_row", where, dtype=pl.Int64)))
        if not found:
            return table.with_columns(pl.lit(None, pl.Utf8).alias(f) for f in facets)
        rows = pl.concat(found).sort("_row")
        at = pl.DataFrame({"_row": np.arange(table.height, dtype=np.int64)})
        gathered = at.join(rows, on="_row", how="left", maintain_order="left")
        return table.with_columns(gathered.drop("_row").get_columns())

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
                values = manifest.column(facet)
                match = values.is_null() if key is None else values == key
                # load_manifest keeps the facets in .idx order: the row number is the doc_id
                doc_ids = pl.Series("doc_id", np.flatnonzero(match.fill_null(False).to_numpy()))
            frames.append(
                doc_ids.to_frame("doc_id").select(pl.lit(name).alias("dataset"), "doc_id")
            )
        if not frames:
            return pl.DataFrame(schema={"dataset": pl.Utf8, "doc_id": pl.Int64})
        return pl.concat(frames)


_SAID: set[str] = set()


def _say_once(line: str) -> None:
    """One warning line on stderr, once per process."""
    import sys

    if line not in _SAID:
        _SAID.add(line)
        print(line, file=sys.stderr)


def _has_column(path: Path, column: str) -> bool:
    import pyarrow.parquet as pq

    return column in pq.read_schema(path).names
