"""Keyword labels for embedding clusters: "e12" says nothing, "e12 (loss, gradient, optimizer)"
says what the documents are about before anyone opens them.

A cluster's keywords are the words its documents use far more often than the other embedded
documents (document frequency ratio, weighted by how common the word is inside the cluster: a
plain log-odds lift). Only embedded documents are read (the embedding sample is capped), so this
stays cheap on any window.
"""

from __future__ import annotations

import polars as pl

from forensics.cluster.texts import ScoredTexts, with_texts

KEYWORDS = 3
MIN_IN_CLUSTER = 0.2  # a keyword is in at least this share of the cluster's documents
WORD = r"[a-z][a-z0-9_]{3,}"  # lowercased words of four characters or more
STOPWORDS = frozenset(
    "this that with from have will your were been they their there which when what about into "
    "than then them these those other some only also more most such each just like over very "
    "true false none self return returns none default optional param type value values http "
    "https html github".split()
)


def cluster_keywords(
    ranked: pl.DataFrame, window_docs: pl.DataFrame, texts: ScoredTexts | None = None
) -> pl.DataFrame:
    """(id, keywords) for each embedding cluster with members; keywords a list of words.
    `texts`: where `window_docs` holds no texts, the store its members' are read from."""
    empty = pl.DataFrame(schema={"id": pl.Utf8, "keywords": pl.List(pl.Utf8)})
    if "kind" not in ranked.columns or ("text" not in window_docs.columns and texts is None):
        return empty
    members = (
        ranked.filter(pl.col("kind") == "embedding")
        .select("id", "members")
        .explode("members")
        .drop_nulls("members")
        .filter(pl.col("members") < window_docs.height)
    )
    if members.height == 0:
        return empty
    rows = members["members"].unique().cast(pl.UInt32).to_list()
    held = [c for c in ("dataset", "doc_id", "text") if c in window_docs.columns]
    words = (
        with_texts(
            window_docs.select(held)
            .with_row_index("members")
            .filter(pl.col("members").is_in(rows)),
            texts,
        )
        .select(
            pl.col("members").cast(pl.Int64),
            pl.col("text").str.to_lowercase().str.extract_all(WORD).list.unique().alias("w"),
        )
        .explode("w")
        .drop_nulls("w")
        .filter(~pl.col("w").is_in(list(STOPWORDS)))
    )
    n_all = len(rows)
    overall = words.group_by("w").agg(pl.len().alias("df_all"))
    sizes = members.group_by("id").agg(pl.len().alias("n"))
    scored = (
        members.with_columns(pl.col("members").cast(pl.Int64))
        .join(words, on="members")
        .group_by("id", "w")
        .agg(pl.len().alias("df"))
        .join(sizes, on="id")
        .join(overall, on="w")
        .with_columns((pl.col("df") / pl.col("n")).alias("rate"))
        .filter(pl.col("rate") >= MIN_IN_CLUSTER)
        .with_columns(
            (pl.col("rate") * (pl.col("rate") / (pl.col("df_all") / n_all)).log()).alias("lift")
        )
        .sort(["id", "lift", "w"], descending=[False, True, False])
    )
    return scored.group_by("id", maintain_order=True).agg(
        pl.col("w").head(KEYWORDS).alias("keywords")
    )


def with_keywords(
    ranked: pl.DataFrame, window_docs: pl.DataFrame, texts: ScoredTexts | None = None
) -> pl.DataFrame:
    """`ranked` with a `keywords` column (null for source clusters and unlabelled ones)."""
    if "keywords" in ranked.columns or ranked.height == 0:
        return ranked
    return ranked.join(cluster_keywords(ranked, window_docs, texts), on="id", how="left")
