"""The census: pass 1 of `forensics spike`, from the replay table alone (no decoding).

The replay table (index arithmetic: which samples and document segments each iteration of the
window and the baseline drew) carries each document's manifest facets, joined by document id.
The census reduces it to one row per document per side (side, dataset, doc_id, facets), read
in iteration ranges (a lazy scan each, so a streamed replay table is never held whole). These
rows are the whole window's and baseline's documents the source clusters count
(forensics.cluster.source: exact documents, shares and newness per dataset, source, crawl
batch, domain and file), and with the replay rows their density per iteration
(forensics.cluster.presence). Nothing is decoded.

The evidence pass's sample is chosen here too (`choose_sample`): per side and group, the
group's `sample_docs` documents with the smallest permanent random number
(forensics.cluster.sample).
"""

from __future__ import annotations

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

CENSUS_ITERATIONS = 50  # iterations per census part: a few hundred thousand rows at most


def census_facets(replay: pl.DataFrame | pl.LazyFrame) -> list[str]:
    """The facets the source clusters group by that the replay table carries."""
    names = replay.collect_schema().names() if isinstance(replay, pl.LazyFrame) else replay.columns
    return [f for f in DEFAULT_FACETS if f in names and f != "dataset"]


def _ranges(first: int, last: int, step: int) -> list[tuple[int, int]]:
    return [(a, min(last, a + step - 1)) for a in range(first, last + 1, step)]


def census_documents(
    replay: pl.DataFrame | pl.LazyFrame, facets: list[str], progress: bool
) -> pl.DataFrame:
    """side, dataset, doc_id and `facets`: each document each side drew, once, sorted; read
    CENSUS_ITERATIONS iterations at a time (a progress bar over them, on a terminal)."""
    lazy = replay.lazy()
    bounds = (
        lazy.group_by("side")
        .agg(pl.col("iteration").min().alias("lo"), pl.col("iteration").max().alias("hi"))
        .sort("side")
        .collect()
    )
    parts = [
        (side, r) for side, lo, hi in bounds.rows() for r in _ranges(lo, hi, CENSUS_ITERATIONS)
    ]
    total = sum(b - a + 1 for _, (a, b) in parts)
    keep = [pl.col(f).drop_nulls().first().alias(f) for f in facets]
    as_codes = [pl.col(f).cast(pl.Categorical) for f in facets]
    sides = []
    with progress_bar(progress, total, "census (iterations)") as advance:
        for name in bounds["side"].to_list():  # one side's parts at a time
            found = []
            for side, (a, b) in parts:
                if side != name:
                    continue
                rows = lazy.filter((pl.col("side") == side) & pl.col("iteration").is_between(a, b))
                rows = rows.select("dataset", "doc_id", *as_codes)
                found.append(rows.group_by("dataset", "doc_id").agg(*keep).collect())
                advance(b - a + 1)
            whole = pl.concat(found, how="diagonal_relaxed")
            del found
            sides.append(
                whole.group_by("dataset", "doc_id")
                .agg(*keep)
                .sort("dataset", "doc_id")
                .select(
                    pl.lit(name, dtype=pl.Categorical).alias("side"),
                    "dataset",
                    pl.col("doc_id").cast(pl.Int64),
                    *facets,
                )
            )
            del whole
    schema = {"side": pl.Categorical, "dataset": pl.Utf8, "doc_id": pl.Int64}
    if not sides:
        return pl.DataFrame(schema=schema | {f: pl.Categorical for f in facets})
    return pl.concat(sides)


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
        pick = own_sample(sample_docs, pl.col("side"), facet_key(facet, docs))
        if facet in FINE_FACETS:
            pick = pick & _in_over_represented(docs, facet) & (pl.col("side") == "window")
        chosen = chosen | docs.select(pick).to_series()
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
