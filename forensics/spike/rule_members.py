"""The culprit of a document rule: when a blamed embedding cluster is dirty by one document-level
garbage rule (a repeated n-gram, mojibake of one kind), every window document that rule flags in
the same dataset belongs to the culprit, whichever embedding cluster it fell in.

An embedding cluster is the model's view of a topic, not of a cause: a burst of repeated
n-grams or of one mojibake spreads over several clusters by what the text is about, and a skip
plan from one cluster's documents leaves the burst's other iterations in the restart. A source
cluster needs nothing added: its blame already takes every document of the source. Spam rules
are left out: template spam is judged across documents (skeletons), not one document at a
time, and its documents do not share a cause the way one rule's do.
"""

from __future__ import annotations

import polars as pl

from forensics.score import FLAG_THRESHOLD

CAUSE_SHARE = 0.5  # a rule is the cluster's cause when it flags this share of its flagged documents


def _garbage_rules(docs: pl.DataFrame) -> pl.DataFrame:
    """(dataset, doc_id, rule): one row per garbage rule key of each garbage-flagged document."""
    return (
        docs.filter(pl.col("garbage_score") >= FLAG_THRESHOLD)
        .select(
            "dataset", "doc_id", pl.col("garbage_rule").cast(pl.Utf8).fill_null("").str.split(";")
        )
        .explode("garbage_rule")
        .rename({"garbage_rule": "rule"})
        .filter(pl.col("rule") != "")
    )


def cluster_causes(
    ranked: pl.DataFrame, seen: pl.DataFrame, window_docs: pl.DataFrame
) -> pl.DataFrame:
    """(cluster, dataset, rule): the garbage rules that flag at least CAUSE_SHARE of a blamed
    embedding cluster's flagged documents, with the datasets those documents come from."""
    embedded = ranked.filter(pl.col("kind") == "embedding")["id"].to_list()
    mine = seen.filter(pl.col("cluster").is_in(embedded))
    docs = window_docs.join(mine, on=["dataset", "doc_id"])
    flagged = (
        docs.filter(
            (pl.col("garbage_score") >= FLAG_THRESHOLD) | (pl.col("spam_score") >= FLAG_THRESHOLD)
        )
        .group_by("cluster")
        .agg(pl.len().alias("_flagged"))
    )
    rules = _garbage_rules(docs).join(mine, on=["dataset", "doc_id"])
    counts = rules.group_by("cluster", "rule").agg(pl.len().alias("_n"), pl.col("dataset").unique())
    return (
        counts.join(flagged, on="cluster")
        .filter(pl.col("_n") >= CAUSE_SHARE * pl.col("_flagged"))
        .explode("dataset")
        .select("cluster", "dataset", "rule")
        .sort("cluster", "dataset", "rule")
    )


def rule_members(
    ranked: pl.DataFrame, seen: pl.DataFrame, window_docs: pl.DataFrame, notes: list[str]
) -> pl.DataFrame:
    """`seen` (dataset, doc_id, cluster) plus the window documents of the blamed embedding
    clusters' causes (`cluster_causes`), each under the cluster whose cause flags it."""
    if not seen.height or "garbage_rule" not in window_docs.columns:
        return seen
    causes = cluster_causes(ranked, seen, window_docs)
    if not causes.height:
        return seen
    added = (
        _garbage_rules(window_docs)
        .join(causes, on=["dataset", "rule"])
        .select("dataset", "doc_id", "cluster", "rule")
        .join(seen.select("dataset", "doc_id"), on=["dataset", "doc_id"], how="anti")
        .sort("cluster", "dataset", "doc_id")
        .unique(["dataset", "doc_id"], keep="first", maintain_order=True)
    )
    for (cluster, rule), part in added.group_by("cluster", "rule", maintain_order=True):
        datasets = ", ".join(sorted(part["dataset"].unique().to_list()))
        notes.append(
            f"{cluster} is dirty by the document rule {rule}: the {part.height:,} other window "
            f"documents of {datasets} it flags belong to the culprit too"
        )
    return pl.concat([seen, added.drop("rule")]).sort("dataset", "doc_id")
