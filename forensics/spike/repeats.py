"""Repeated n-grams in the spike's documents: OLMo-core's repeated-n-gram rule (a 1-13-token
period repeated MAX_COUNT = 32 or more times in a row, `forensics.score.repeats`, the rule
`forensics scan` flags documents by) on each document's token ids, as one more document rule.

A flagged document gets garbage_score 1.0, the reason "a P-token n-gram repeated T times in a
row" and the rule key REPEATS_RULE beside the scorers' own (joined as they join theirs), so it
counts as flagged wherever the spike reads the scores: the clusters' flagged rates and reasons,
the blame, the flagged block list and the report. The rule reads token ids, not text: a family
whose replayer cannot list a document's tokens (the `document_token_ids` capability,
dataloaders/base.py) gets a note instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from dataloaders.mapped_pages import released_chunks, releasing_pages
from forensics.pipeline import cached_table, module_version
from forensics.score.repeats import MAX_COUNT, find_repeats
from forensics.spike.run_context import SpikeRun

REPEATS_RULE = "repeated_ngram"
REPEATS_SCHEMA = {
    "dataset": pl.Utf8,
    "doc_id": pl.Int64,
    "ngram_times": pl.Int64,
    "ngram_period": pl.Int64,
}


@releasing_pages
def document_repeats(replayer: Any, distinct: pl.DataFrame) -> pl.DataFrame | None:
    """(dataset, doc_id, ngram_times, ngram_period): each document's strongest repeated n-gram
    (times 0 when none); None when the replayer cannot give token ids."""
    if not replayer.document_token_ids:
        return None
    times, period = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for chunk in released_chunks(distinct):
        found = find_repeats(replayer.document_tokens(chunk))
        times.append(np.asarray(found.times, np.int64))
        period.append(np.asarray(found.period, np.int64))
    return distinct.select("dataset", pl.col("doc_id").cast(pl.Int64)).with_columns(
        ngram_times=pl.Series(np.concatenate(times), dtype=pl.Int64),
        ngram_period=pl.Series(np.concatenate(period), dtype=pl.Int64),
    )


def known_repeats(replayer: Any, distinct: pl.DataFrame, computed: list[Path]) -> pl.DataFrame:
    """`document_repeats` of `distinct`, in its order: read from the `computed` tables where
    they hold the document, found here for the others."""
    keys = distinct.select("dataset", pl.col("doc_id").cast(pl.Int64))
    tables = [pl.read_parquet(f) for f in computed if f.is_file()]
    known = pl.concat(tables).unique(["dataset", "doc_id"]) if tables else None
    missing = keys if known is None else keys.join(known, on=["dataset", "doc_id"], how="anti")
    if missing.height:
        found = document_repeats(replayer, missing)
        if found is None:
            return pl.DataFrame(schema=REPEATS_SCHEMA)
        known = found if known is None else pl.concat([known, found])
    assert known is not None
    return keys.join(known, on=["dataset", "doc_id"], how="left", maintain_order="left")


def repeats_reason(times: int, period: int) -> str:
    """The reason a flagged document carries (the words `forensics scan` uses)."""
    return f"a {period}-token n-gram repeated {times} times in a row"


def flag_repeats(scored: pl.DataFrame, repeats: pl.DataFrame) -> pl.DataFrame:
    """`scored` with the documents `repeats` flags (times >= MAX_COUNT) marked as garbage:
    score 1.0, the reason and rule key appended to the garbage scorer's. Row order is kept."""
    hit = repeats.filter(pl.col("ngram_times") >= MAX_COUNT)
    if hit.height == 0:
        return scored
    reasons = hit.select(
        "dataset",
        "doc_id",
        pl.struct("ngram_times", "ngram_period")
        .map_elements(
            lambda r: repeats_reason(r["ngram_times"], r["ngram_period"]), return_dtype=pl.Utf8
        )
        .alias("_reason"),
    )
    joined = scored.join(reasons, on=["dataset", "doc_id"], how="left", maintain_order="left")
    flagged = pl.col("_reason").is_not_null()

    def appended(column: str, value: pl.Expr, sep: str) -> pl.Expr:
        old = pl.col(column).fill_null("")
        both = pl.when(old == "").then(value).otherwise(old + sep + value)
        return pl.when(flagged).then(both).otherwise(pl.col(column)).alias(column)

    extra = [appended("garbage_reason", pl.col("_reason"), "; ")]
    if "garbage_rule" in scored.columns:
        extra.append(appended("garbage_rule", pl.lit(REPEATS_RULE), ";"))
    return joined.with_columns(
        pl.when(flagged).then(1.0).otherwise(pl.col("garbage_score")).alias("garbage_score"),
        *extra,
    ).drop("_reason")


def repeats_stage(
    run: SpikeRun,
    distinct: pl.DataFrame,
    scored: pl.DataFrame,
    key: str | None = None,
    computed: list[Path] | None = None,
) -> pl.DataFrame:
    """The scored documents with the repeated-n-gram rule applied (its table cached beside the
    scores, keyed by the rule's source and `key`: the run's, or the scored set's). `computed`:
    tables the parts' workers wrote (`document_repeats` of their documents), read instead of
    computing those documents here."""
    if not run.replayer.document_token_ids:
        run.notes.append(
            "repeated n-grams were not checked: this data family cannot list a document's token ids"
        )
        return scored

    def compute() -> pl.DataFrame:
        return known_repeats(run.replayer, distinct, computed or [])

    name = f"ngrams-{key or run.key}-{module_version('forensics.score')}.parquet"
    with run.clock.stage("repeats", f"{distinct.height:,} documents' token ids", spinner=True):
        table = cached_table(run.cache / name, compute, run.hits, "repeats")
    return flag_repeats(scored, table)
