"""Scoring in two phases, so a window's documents can be scored in parts on other processes or
machines (`spike --engine ray`) with the same result as scoring them in one table.

    score_batch(texts) -> BatchScores      per document: garbage, spam rules, skeleton signatures
    combine(parts, texts) -> scores table  across documents: the template (skeleton) clusters

Only the skeleton signal compares documents with each other, and it needs only each document's
MinHash signatures (about 2 KB), not its text or tokens; everything else is per document. A
`BatchScores` travels as a Parquet part (`to_frame`); forensics.spike.parts merges the parts
without holding every document's signatures (`skeleton.cluster_bands`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from forensics.score.garbage import score_garbage
from forensics.score.skeleton import Signatures, cluster_signatures
from forensics.score.spam import SpamSignals, spam_signals
from forensics.score.table import assemble_scores
from forensics.score.tokens import tokenize

BATCH_COLUMNS = (
    "garbage_score", "garbage_reason", "garbage_rule",
    "spam_doc_score", "spam_doc_reason", "spam_doc_rule",
    "sig_skeleton", "sig_eligible", "sig_raw", "sig_short",
)  # fmt: skip


@dataclass
class BatchScores:
    """The per-document half of the scores of one batch of texts (order kept)."""

    garbage: pl.DataFrame  # garbage_score, garbage_reason, garbage_rule
    spam: np.ndarray  # per-document spam score (max over the spam rules), float
    spam_reason: list[str]
    spam_rule: list[str]
    signatures: Signatures

    def to_frame(self) -> pl.DataFrame:
        """One row per text, BATCH_COLUMNS (signatures as fixed-size UInt64 arrays)."""
        return self.garbage.select("garbage_score", "garbage_reason", "garbage_rule").with_columns(
            pl.Series("spam_doc_score", self.spam, dtype=pl.Float64),
            pl.Series("spam_doc_reason", self.spam_reason, dtype=pl.Utf8),
            pl.Series("spam_doc_rule", self.spam_rule, dtype=pl.Utf8),
            pl.Series("sig_skeleton", self.signatures.skeleton),
            pl.Series("sig_eligible", self.signatures.eligible, dtype=pl.Boolean),
            pl.Series("sig_raw", self.signatures.raw),
            pl.Series("sig_short", self.signatures.short, dtype=pl.Boolean),
        )


def score_batch(texts: pl.Series) -> BatchScores:
    """Every per-document score of `texts` (one process, no threads: the engines parallelise
    over batches)."""
    texts = texts.cast(pl.Utf8).rename("text")
    tok = tokenize(texts)
    spam = spam_signals(texts, tok)
    return BatchScores(
        score_garbage(texts), spam.score, spam.reasons, spam.rules, Signatures.of(tok)
    )


def combine(parts: list[BatchScores], texts: pl.Series) -> pl.DataFrame:
    """The scores table of `texts` (the concatenation of the parts' texts, in order): the
    per-document scores, and the skeleton signal computed over all of them at once.

    Returns garbage_score, spam_score, garbage_reason, spam_reason, garbage_rule, spam_rule."""
    texts = texts.cast(pl.Utf8)
    if not parts:
        parts = [score_batch(texts.slice(0, 0))]
    signatures = Signatures.concat([p.signatures for p in parts])
    clusters = cluster_signatures(signatures, texts.hash(5).to_numpy())
    spam = SpamSignals(
        np.concatenate([p.spam for p in parts]),
        [r for p in parts for r in p.spam_reason],
        [r for p in parts for r in p.spam_rule],
        {},
    )
    garbage = pl.concat([p.garbage for p in parts])
    return assemble_scores(texts, garbage, spam, clusters, keys=True)
