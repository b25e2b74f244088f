"""The scored documents' texts, read from the files they were scored in, by key.

A sampled spike (forensics.spike.passes) keeps a row per document of each side in memory, and
at production scale the texts of the scored documents would be most of those rows' bytes
(hundreds of MB: the sample's and every named group's). What reads a text needs few of them at
a time: the embedding sample, the examples, an embedding cluster's members for its keywords, a
slice of documents.parquet. So the sides carry no text; `ScoredTexts` finds each text in the
part file that scored it (the parts are kept in the run's cache) and reads that part's text
column alone. A table that holds its texts (the exhaustive path's sides, a test's table) is
used as it is: `with_texts` adds the column only where it is missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from forensics.cluster.positions import positions_in
from forensics.errors import ForensicsError

KEYS = ["dataset", "doc_id"]


@dataclass
class ScoredTexts:
    """Where each scored document's text is: `index` holds (dataset, doc_id, part, row),
    sorted by key; `parts` the Parquet files (each with a `text` column, its rows in the order
    of its keys file)."""

    parts: list[str]
    index: pl.DataFrame

    @classmethod
    def from_items(cls, items: list[dict]) -> ScoredTexts:
        """From the scored parts (forensics.spike.parts: each item's `keys` file lists its
        documents in the order of its `out` file's rows)."""
        frames = [
            pl.read_parquet(item["keys"]).select(
                pl.col("dataset").cast(pl.Utf8),
                pl.col("doc_id").cast(pl.Int64),
                pl.lit(number, dtype=pl.Int32).alias("part"),
                pl.int_range(pl.len(), dtype=pl.Int32).alias("row"),
            )
            for number, item in enumerate(items)
        ]
        schema = {"dataset": pl.Utf8, "doc_id": pl.Int64, "part": pl.Int32, "row": pl.Int32}
        index = pl.concat(frames) if frames else pl.DataFrame(schema=schema)
        # a document scored twice (never expected) is read from its first part
        index = index.unique(KEYS, keep="first", maintain_order=True).sort(KEYS)
        return cls([str(item["out"]) for item in items], index)

    def texts(self, keys: pl.DataFrame) -> pl.Series:
        """The text of each row of `keys` (dataset, doc_id), null where it was not scored.
        Gathered in Arrow memory, part by part: never a Python string per text (freed, those
        leave the allocator's heap fragmented, and a slice of documents.parquet holds tens of
        thousands)."""
        empty = pl.Series("text", [None] * keys.height, dtype=pl.Utf8)
        if not keys.height or not self.index.height:
            return empty
        found = positions_in(self.index, keys.select(KEYS))
        hit = np.flatnonzero(found >= 0)
        if not hit.size:
            return empty
        where = self.index.select("part", "row").gather(found[hit])
        parts, rows = where["part"].to_numpy(), where["row"].to_numpy()
        order = np.argsort(parts, kind="stable")
        bounds = np.flatnonzero(np.diff(parts[order])) + 1
        pieces = []
        for chosen in np.split(order, bounds):
            text = self._part_texts(int(parts[chosen[0]])).gather(rows[chosen])
            pieces.append(pl.DataFrame({"_at": hit[chosen], "text": text}))
        placed = pl.concat(pieces)
        every = pl.DataFrame({"_at": np.arange(keys.height, dtype=np.int64)})
        return every.join(placed, on="_at", how="left", maintain_order="left")["text"]

    def _part_texts(self, part: int) -> pl.Series:
        path = self.parts[part]
        if not Path(path).is_file():
            raise ForensicsError(
                f"{path}: a scored part is missing from the cache (removed while the spike "
                "ran?); rerun the spike"
            )
        return pl.read_parquet(path, columns=["text"])["text"].cast(pl.Utf8)


def with_texts(docs: pl.DataFrame, texts: ScoredTexts | None) -> pl.DataFrame:
    """`docs` with its `text` column: as it is where it has one (or no store is given), else
    read by key from `texts` (null for a document not scored)."""
    if "text" in docs.columns or texts is None:
        return docs
    return docs.with_columns(texts.texts(docs.select(KEYS)))
