"""documents.parquet's table (forensics.report.documents): its joins run on the keys and sit
beside the wide table; the rows are the straightforward joins', sorted by document."""

from __future__ import annotations

import polars as pl

from forensics.cluster import assign_verdicts, cluster_sources
from forensics.cluster.verdict import culprit_docs
from forensics.report.documents import cluster_membership, documents_table, write_documents_table
from forensics_testing.windows import generate_run


def _joined(window: pl.DataFrame, ranked: pl.DataFrame, replay: pl.DataFrame,
            blamed: pl.DataFrame) -> pl.DataFrame:  # fmt: skip
    """The same table by plain joins on the whole table, then a sort (the reference)."""
    docs = window.with_row_index("_row")
    seen = replay.group_by("dataset", "doc_id").agg(
        pl.col("iteration").unique().sort().alias("iterations"),
        pl.col("sample_index").n_unique().alias("samples"),
    )
    culprit = blamed.select("dataset", "doc_id", pl.col("cluster").alias("culprit"))
    return (
        docs.join(cluster_membership(ranked, docs.height), on="_row", how="left")
        .join(seen, on=["dataset", "doc_id"], how="left")
        .join(
            culprit.unique(["dataset", "doc_id"], keep="first"),
            on=["dataset", "doc_id"],
            how="left",
        )  # fmt: skip
        .sort("dataset", "doc_id")
    )


def test_documents_table_rows_are_the_plain_joins() -> None:
    run = generate_run(1500, 1500, dirty_share=0.08, seed=5)
    ranked = assign_verdicts(cluster_sources(run.window, run.baseline))
    blamed = culprit_docs(ranked, run.window)
    table = documents_table(run.window, ranked, run.replay, blamed)
    reference = _joined(run.window, ranked, run.replay, blamed)
    assert table.height == reference.height == run.window.height
    assert table.select("dataset", "doc_id").equals(reference.select("dataset", "doc_id"))
    for column in ("clusters", "verdict", "iterations", "culprit"):
        got, want = table[column], reference[column]
        if column == "verdict":
            want = want.fill_null("clean")
        assert got.equals(want), column
    assert table["samples"].equals(reference["samples_right"].fill_null(0))  # the run has its own


def test_documents_table_is_sorted_whatever_the_order_given() -> None:
    run = generate_run(800, 800, dirty_share=0.08, seed=2)
    shuffled = run.window.sample(fraction=1.0, shuffle=True, seed=3)
    ranked = assign_verdicts(cluster_sources(shuffled, run.baseline))
    table = documents_table(shuffled, ranked, run.replay, culprit_docs(ranked, shuffled))
    assert table.select("dataset", "doc_id").equals(
        shuffled.select("dataset", "doc_id").sort("dataset", "doc_id")
    )


def test_documents_written_in_slices_are_the_whole_table(tmp_path) -> None:
    """The file written a slice of documents at a time holds the whole table's rows (slices of
    7 documents: clusters cut across every slice), categoricals written as strings; a window
    not sorted is written whole, sorted."""
    run = generate_run(1500, 1500, dirty_share=0.08, seed=5)
    window = run.window.sort("dataset", "doc_id")
    ranked = assign_verdicts(cluster_sources(window, run.baseline))
    blamed = culprit_docs(ranked, window)
    whole = documents_table(window, ranked, run.replay, blamed)
    coded = window.with_columns(pl.col("source").cast(pl.Categorical))
    # a replay row of a document the window table does not hold is in no slice
    stray = run.replay.head(1).with_columns(
        pl.lit(10**9).cast(run.replay.schema["doc_id"]).alias("doc_id")
    )
    replay = pl.concat([stray, run.replay])
    write_documents_table(coded, ranked, replay, blamed, tmp_path / "d.parquet", 7)
    written = pl.read_parquet(tmp_path / "d.parquet")
    assert written.schema["source"] == pl.Utf8
    assert written.equals(whole)

    shuffled = window.sample(fraction=1.0, shuffle=True, seed=3)
    ranked = assign_verdicts(cluster_sources(shuffled, run.baseline))
    blamed = culprit_docs(ranked, shuffled)
    write_documents_table(shuffled, ranked, run.replay, blamed, tmp_path / "s.parquet", 7)
    want = documents_table(shuffled, ranked, run.replay, blamed)
    assert pl.read_parquet(tmp_path / "s.parquet").equals(want)
