"""documents.parquet: every window document, with what the report concluded about it.

The report shows a few excerpts; an engineer checking the blame needs every document: its text,
scores and reasons, the clusters it belongs to (and their verdicts), the iterations that drew it,
and its provenance (the manifest's facets). One row per distinct window document:

    dataset, doc_id       the document (doc_id in its dataset's .idx order)
    text                  the decoded text, raw (escape before showing)
    garbage_score, spam_score, garbage_reason, spam_reason    the scorers' output
    flagged               either score >= the flag threshold
    clusters              ids of every cluster holding it (source facets; embedding if embedded)
    verdict               the worst verdict among them (culprit > suspect > clean)
    culprit               the culprit cluster it is blamed with (null if none)
    iterations            sorted iterations of the window that drew it (a sample held a segment)
    samples               how many window samples held a segment of it
    <facets>              the manifest's columns (source, crawl_batch, url, ...)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import polars as pl

from dataloaders.atomic import write_parquet_parts
from forensics.cluster.positions import positions_in
from forensics.cluster.texts import ScoredTexts, with_texts
from forensics.score import FLAG_THRESHOLD

DOCUMENTS_FILE = "documents.parquet"
VERDICT_ORDER = {"culprit": 0, "suspect": 1, "clean": 2}
SLICE_DOCUMENTS = 200_000  # window documents whose rows are built and written at once


def cluster_membership(ranked: pl.DataFrame, n_docs: int) -> pl.DataFrame:
    """_row (index into the window documents), clusters (ids), verdict (worst of them)."""
    if ranked.height == 0:
        return pl.DataFrame(schema={"_row": pl.UInt32, "clusters": pl.List(pl.Utf8)})
    exploded = (
        ranked.select("id", "verdict", "members")
        .with_row_index("_rank")
        .explode("members")
        .drop_nulls("members")
        .filter(pl.col("members") < n_docs)
        .with_columns(
            pl.col("members").cast(pl.UInt32).alias("_row"),
            pl.col("verdict").replace_strict(VERDICT_ORDER, default=2).alias("_v"),
        )
    )
    return (
        exploded.sort("_rank")
        .group_by("_row", maintain_order=True)
        .agg(
            pl.col("id").alias("clusters"),
            pl.col("_v").min().alias("_v"),
        )
        .with_columns(
            pl.col("_v")
            .replace_strict({v: k for k, v in VERDICT_ORDER.items()}, return_dtype=pl.Utf8)
            .alias("verdict")
        )
        .drop("_v")
    )


def documents_table(
    window_docs: pl.DataFrame, ranked: pl.DataFrame, replay: pl.DataFrame, culprit: pl.DataFrame
) -> pl.DataFrame:
    """The documents.parquet table (see the module docstring), sorted by dataset, doc_id."""
    docs = window_docs.with_row_index("_row")
    member = cluster_membership(ranked, docs.height)
    seen = replay.group_by("dataset", "doc_id").agg(
        pl.col("iteration").unique().sort().alias("iterations"),
        pl.col("sample_index").n_unique().alias("samples"),
    )
    blamed = culprit.select("dataset", "doc_id", pl.col("cluster").alias("culprit")).unique(
        ["dataset", "doc_id"], keep="first"
    )
    score = [c for c in ("garbage_score", "spam_score") if c in docs.columns]
    flagged = pl.any_horizontal([pl.col(c).fill_null(0.0) >= FLAG_THRESHOLD for c in score])
    if "_scored" in docs.columns:  # a sampled window: an unscored document is neither
        flagged = pl.when(pl.col("_scored")).then(flagged).otherwise(pl.lit(None, pl.Boolean))
    # The joins run on the keys alone, in the documents' order, and their columns are put
    # beside the documents: the wide table (texts, scores, facets) is never copied.
    keys = ["dataset", "doc_id"]
    found = (
        docs.select("_row", *keys)
        .join(member, on="_row", how="left", maintain_order="left")
        .join(seen, on=keys, how="left", maintain_order="left")
        .join(blamed, on=keys, how="left", maintain_order="left")
    )
    added = [  # a name the documents already hold gets join's suffix, as a join would give it
        s.alias(f"{s.name}_right") if s.name in docs.columns else s
        for s in found.drop("_row", *keys).get_columns()
    ]
    table = (
        docs.hstack(added)
        .with_columns(
            (flagged if score else pl.lit(False)).alias("flagged"),
            pl.col("verdict").fill_null("clean"),
            pl.col("samples").fill_null(0),
        )
        .drop("_row", *[c for c in ("_u", "_scored") if c in docs.columns])
    )
    front = ["dataset", "doc_id", "verdict", "culprit", "flagged", *score]
    front += [c for c in ("garbage_reason", "spam_reason") if c in table.columns]
    front += ["clusters", "iterations", "samples", "text"]
    front = [c for c in front if c in table.columns]
    rest = [c for c in table.columns if c not in front]
    table = table.select(*front, *rest)
    order = table.select(pl.arg_sort_by(keys)).to_series().to_numpy()
    if (order == np.arange(table.height)).all():  # sorted already (both sides' tables are)
        return table
    return table[order]


def write_documents_table(
    window_docs: pl.DataFrame,
    ranked: pl.DataFrame,
    replay: pl.DataFrame,
    culprit: pl.DataFrame,
    path: Path,
    slice_documents: int = SLICE_DOCUMENTS,
    figures: pl.DataFrame | None = None,
    texts: ScoredTexts | None = None,
) -> None:
    """`documents_table`'s rows written to `path` (atomically), SLICE_DOCUMENTS documents at
    a time, one row group each: the table of millions of documents is never held whole.
    Categorical columns are written as strings, as an exhaustive run's are. The documents are
    sorted already (both sides' tables are); otherwise the table is built whole and sorted.
    `figures`: columns found by key (dataset, doc_id) and put beside each slice's documents
    (null where absent); `texts`: where the documents hold no texts, the store each slice's
    are read from (forensics.cluster.texts)."""
    keys = ["dataset", "doc_id"]
    in_order = window_docs.height == 0 or bool(
        (window_docs.select(pl.arg_sort_by(keys)).to_series().to_numpy()
         == np.arange(window_docs.height)).all()
    )  # fmt: skip
    step = max(slice_documents, 1) if in_order else max(window_docs.height, 1)
    rows_of = replay_by_slice(replay, window_docs, step) if in_order else None

    def slices() -> Iterator[pl.DataFrame]:
        for number, lo in enumerate(range(0, max(window_docs.height, 1), step)):
            docs = with_texts(with_figures(window_docs.slice(lo, step), figures), texts)
            seen = (replay.join(docs.select(keys), on=keys, how="semi") if rows_of is None
                    else replay[rows_of(number)])  # fmt: skip
            part = documents_table(docs, members_in(ranked, lo, docs.height), seen, culprit)
            yield part.with_columns(pl.col(pl.Categorical).cast(pl.Utf8))

    write_parquet_parts(slices(), path)


def replay_by_slice(
    replay: pl.DataFrame, window_docs: pl.DataFrame, step: int
) -> Callable[[int], np.ndarray]:
    """The replay rows of each slice of `step` window documents (sorted by dataset, doc_id),
    as row numbers: every row's document found once by binary search (`positions_in`), not a
    join over every replay row for each slice. Rows of no window document are in no slice."""
    at = positions_in(window_docs, replay.select("dataset", "doc_id"))
    slice_of = np.where(at >= 0, at // step, -1)
    del at
    order = np.argsort(slice_of, kind="stable")
    bounds = np.searchsorted(slice_of[order], np.arange(-1, slice_of.max(initial=-1) + 2))
    del slice_of

    def rows(number: int) -> np.ndarray:
        if number + 2 >= len(bounds):
            return order[:0]
        return order[bounds[number + 1] : bounds[number + 2]]

    return rows


def members_in(ranked: pl.DataFrame, first: int, count: int) -> pl.DataFrame:
    """`ranked` with each cluster's `members` cut to the rows first..first+count-1, counted
    from `first`: the clusters as a slice of the documents sees them."""
    if "members" not in ranked.columns:
        return ranked
    inside = pl.element().is_between(first, first + count - 1)
    return ranked.with_columns(pl.col("members").list.eval(pl.element().filter(inside) - first))


def with_figures(docs: pl.DataFrame, figures: pl.DataFrame | None) -> pl.DataFrame:
    """`docs` with `figures`' other columns beside it, found by (dataset, doc_id)."""
    if figures is None:
        return docs
    keys = ["dataset", "doc_id"]
    found = docs.select(keys).join(figures, on=keys, how="left", maintain_order="left")
    return docs.hstack(found.drop(keys).get_columns())
