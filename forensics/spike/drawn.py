"""Which documents each side of the spike (window, baseline) drew: the tables every document
stage starts from, cached by the run's key."""

from __future__ import annotations

import polars as pl

from forensics.pipeline import cached_table
from forensics.spike.doc_census import census_path
from forensics.spike.run_context import SpikeRun


def drawn_documents(run: SpikeRun, replay: pl.LazyFrame) -> pl.DataFrame:
    """side, dataset, doc_id: each document each side drew, once, sorted (sides-<key>.parquet:
    a warm rerun reads these 0.2M rows instead of finding them among the replay's millions).
    Read from the census's file where the passes wrote one (forensics.spike.doc_census: the
    same rows, already distinct and in this order); else found by polars' streaming engine
    over the replay's cache file when there is one (three columns read, never the whole
    table), else in `replay`."""
    columns = ("side", "dataset", "doc_id")
    stored = run.cache / f"replay-{run.key}.parquet"
    census = census_path(run.cache, run.key)

    def drawn() -> pl.DataFrame:
        if census.is_file():
            found = pl.scan_parquet(census).select(pl.col("side").cast(pl.Utf8), *columns[1:])
            return found.collect(engine="streaming")
        frame = pl.scan_parquet(stored) if stored.is_file() else replay.lazy()
        return frame.select(columns).unique().sort(columns).collect(engine="streaming")

    return cached_table(run.cache / f"sides-{run.key}.parquet", drawn, run.hits, "sides")


def drawn_scan(run: SpikeRun, replay: pl.LazyFrame) -> pl.LazyFrame:
    """`drawn_documents` as a scan of its cache file (written first where missing): for a
    reader of one side's rows, which then never holds the other's."""
    path = run.cache / f"sides-{run.key}.parquet"
    if not path.is_file():
        drawn_documents(run, replay)  # written to `path` (or raises)
    return pl.scan_parquet(path)


def distinct_documents(run: SpikeRun, replay: pl.LazyFrame) -> pl.DataFrame:
    """dataset, doc_id: each document the window or the baseline drew, once, sorted."""
    return cached_table(
        run.cache / f"distinct-{run.key}.parquet",
        lambda: drawn_documents(run, replay).select("dataset", "doc_id").unique()
        .sort("dataset", "doc_id"),
        run.hits,
        "distinct",
    )  # fmt: skip
