"""The census: pass 1 of `forensics spike`, from the replay table alone (no decoding).

The replay table (index arithmetic: which samples and document segments each iteration of the
window and the baseline drew) carries each document's manifest facets, joined by document id.
The census reduces it to one row per document per side (side, dataset, doc_id, facets), read
a range of document ids at a time (a lazy scan each, so neither the replay table nor one
group-by over all of it is ever held whole). These
rows are the whole window's and baseline's documents the source clusters count
(forensics.cluster.source: exact documents, shares and newness per dataset, source, crawl
batch, domain and file), and with the replay rows their density per iteration
(forensics.cluster.presence). Nothing is decoded.

The evidence pass's sample is chosen here too (`choose_sample`): per side and group, the
group's `sample_docs` documents with the smallest permanent random number
(forensics.cluster.sample).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from dataloaders.progress import progress_bar
from forensics.cluster.sample import (
    FINE_FACETS,
    over_represented_in_census,
    own_sample,
    permanent_random,
)
from forensics.cluster.source import DEFAULT_FACETS, facet_key
from forensics.pipeline import StageClock, cached_table

CENSUS_ROWS = 2_000_000  # replay rows per range of document ids the census reads at once


def census_facets(replay: pl.DataFrame | pl.LazyFrame) -> list[str]:
    """The facets the source clusters group by that the replay table carries."""
    names = replay.collect_schema().names() if isinstance(replay, pl.LazyFrame) else replay.columns
    return [f for f in DEFAULT_FACETS if f in names and f != "dataset"]


def census_buckets(lazy: pl.LazyFrame) -> list[tuple[str | None, int, int, int]]:
    """(dataset, first doc_id, last doc_id, replay rows about): ranges of each dataset's
    document ids holding about CENSUS_ROWS replay rows each, in (dataset, doc_id) order."""
    spans = (
        lazy.group_by("dataset")
        .agg(
            pl.len().alias("rows"),
            pl.col("doc_id").min().alias("lo"),
            pl.col("doc_id").max().alias("hi"),
        )
        .sort("dataset")
        .collect()
    )
    buckets = []
    for dataset, rows, lo, hi in spans.rows():
        if lo is None:  # rows without a document
            continue
        count = max(1, -(-rows // CENSUS_ROWS))
        width = (hi - lo) // count + 1
        for k in range(count):
            first = lo + k * width
            if first <= hi:
                buckets.append((dataset, first, min(hi, first + width - 1), rows // count))
    return buckets


def census_documents(
    replay: pl.DataFrame | pl.LazyFrame, facets: list[str], progress: bool
) -> pl.DataFrame:
    """side, dataset, doc_id and `facets`: each document each side drew, once, sorted by side
    then (dataset, doc_id). Read a range of document ids at a time (`census_buckets`): a
    group-by holds its input several times over, so one over every replay row of a
    production window would be gigabytes; each range's is a few hundred MB at most, and the
    ranges, in order, are already the sorted table. A progress bar over the replay rows, on
    a terminal."""
    lazy = replay.lazy()
    buckets = census_buckets(lazy)
    keep = [pl.col(f).drop_nulls().first().alias(f) for f in facets]
    as_codes = [pl.col(f).cast(pl.Categorical) for f in facets]
    found: list[pl.DataFrame] = []
    with progress_bar(progress, sum(b[3] for b in buckets), "census (replay rows)") as advance:
        for dataset, first, last, rows in buckets:
            picked = lazy.filter(
                pl.col("dataset").eq_missing(dataset) & pl.col("doc_id").is_between(first, last)
            )
            found.append(
                picked.select(pl.col("side").cast(pl.Categorical), "dataset", "doc_id", *as_codes)
                .group_by("side", "dataset", "doc_id")
                .agg(*keep)
                .sort("doc_id")
                .collect()
            )
            advance(rows)
    schema = {"side": pl.Categorical, "dataset": pl.Utf8, "doc_id": pl.Int64}
    if not found:
        return pl.DataFrame(schema=schema | {f: pl.Categorical for f in facets})
    columns = ["side", "dataset", pl.col("doc_id").cast(pl.Int64), *facets]
    sides = [
        pl.concat([part.filter(pl.col("side") == name) for part in found]).select(columns)
        for name in sorted({str(v) for part in found for v in part["side"].unique().to_list()})
    ]
    del found
    return pl.concat(sides, rechunk=False)


def census_path(cache: Path, key: str) -> Path:
    """The census's file in a run's cache (census-<key>.parquet)."""
    return cache / f"census-{key}.parquet"


def census_stage(
    replay: pl.DataFrame | pl.LazyFrame,
    cache_file: object,
    clock: StageClock,
    hits: dict[str, bool],
    progress: bool,
) -> pl.DataFrame:
    """The census of window and baseline, cached in `cache_file` (census-<key>.parquet); its
    side and facets categorical (`coded`)."""
    facets = census_facets(replay)
    with clock.stage("census", "every sample's documents, from the index"):
        census = cached_table(
            cache_file,  # type: ignore[arg-type]
            lambda: census_documents(replay, facets, progress),
            hits,
            "census",
        )
        return coded(census, ["side", *facets])


def coded(table: pl.DataFrame, columns: list[str]) -> pl.DataFrame:
    """`columns` of `table` as polars categoricals: a row then holds a 4-byte code where a
    string column holds a 16-byte view; at millions of documents the facets are most of the
    census's bytes. Values, order (lexical) and comparisons with strings are the strings'."""
    return table.with_columns(
        pl.col(c).cast(pl.Categorical) for c in columns if table.schema[c] != pl.Categorical
    )


def choose_sample(census: pl.DataFrame, sample_docs: int) -> pl.DataFrame:
    """The census with `_u` (forensics.cluster.sample.permanent_random) and `_chosen`: the
    document is in its group's own sample, on its side, for at least one facet. A fine facet's
    group (forensics.cluster.sample.FINE_FACETS) is sampled only in the window and only where
    the census shows it over-represented there (`_over_represented`)."""
    facets = ["dataset", *[c for c in census.columns if c in DEFAULT_FACETS and c != "dataset"]]
    docs = census.with_columns(permanent_random(census))
    chosen = pl.repeat(False, docs.height, dtype=pl.Boolean, eager=True)
    for facet in facets:  # one facet's groups ranked at a time: each ranks every document
        pick = own_sample(docs, sample_docs, pl.col("side"), facet_key(facet, docs))
        if facet in FINE_FACETS:
            fine = _in_over_represented(docs, facet) & (pl.col("side") == "window")
            pick = pick & docs.select(fine).to_series()
        chosen = chosen | pick
    return docs.with_columns(chosen.alias("_chosen"))


def _in_over_represented(docs: pl.DataFrame, facet: str) -> pl.Expr:
    """Whether a row's `facet` group is over-represented in the window (`_over_represented`):
    a test of its value, so the census is not joined (copied) per fine facet."""
    over = _over_represented(docs, facet).filter(pl.col(f"_over_{facet}"))[facet]
    inside = pl.col(facet).is_in(over.drop_nulls().implode()).fill_null(False)
    return inside | pl.col(facet).is_null() if over.null_count() else inside


def _over_represented(docs: pl.DataFrame, facet: str) -> pl.DataFrame:
    """(facet key, `_over_<facet>`): whether each of the facet's window groups is
    over-represented against the baseline, from the census's counts
    (forensics.cluster.sample.over_represented_in_census); a missing value is a group of its
    own, as the clusters' `facet_key` makes it."""
    counts = (
        docs.group_by(facet)
        .agg(
            (pl.col("side") == "window").sum().alias("a"),
            (pl.col("side") == "baseline").sum().alias("c"),
        )
        .filter(pl.col("a") > 0)
    )
    n_window = int((docs["side"] == "window").sum())
    n_baseline = docs.height - n_window
    over = over_represented_in_census(
        counts["a"].to_numpy(), counts["c"].to_numpy(), n_window, n_baseline
    )
    return counts.select(facet).with_columns(pl.Series(f"_over_{facet}", over))
