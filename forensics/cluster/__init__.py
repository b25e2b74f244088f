"""Clusters of the window's documents (by source and by embedding) and their verdicts.

    clusters = cluster_sources(window_docs, baseline_docs)
    emb_clusters, assignments = cluster_embeddings(window_docs, baseline_docs, cap=3000)
    ranked = assign_verdicts(pl.concat([clusters, emb_clusters], how="diagonal"))
    blocked = culprit_docs(ranked, window_docs)

torch and sentence-transformers are imported only when `cluster_embeddings` runs.
"""

from forensics.cluster.embedder import DEFAULT_CAP
from forensics.cluster.embedding import cluster_embeddings, describe_sample
from forensics.cluster.source import cluster_sources
from forensics.cluster.verdict import (
    assign_verdicts,
    culprit_docs,
    headline_culprit,
    rule_text,
)

__all__ = [
    "DEFAULT_CAP",
    "assign_verdicts",
    "cluster_embeddings",
    "cluster_sources",
    "culprit_docs",
    "describe_sample",
    "headline_culprit",
    "rule_text",
]
