"""`score_table`: run every scorer over one text column and attach scores and reasons.

The cross-document skeleton signal needs every row at once, so the table is scored as a whole;
the heavy lifting inside each scorer is polars (native, multi-threaded), numpy and the compiled
loops of `utf8_scan` and `doc_counts`. Only documents that already carry evidence reach
Python-level code (legacy-codec checks, reasons).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from dataloaders.console import make_console
from forensics.errors import ForensicsError
from forensics.score.code import SYMBOLS
from forensics.score.garbage import score_garbage
from forensics.score.licence import is_licence
from forensics.score.skeleton import (
    SHORT_MAX_SYMBOLS,
    Signatures,
    SkeletonClusters,
    cluster_signatures,
    find_clusters,
    skeleton_scores,
)
from forensics.score.spam import SpamSignals, spam_signals
from forensics.score.spam_lines import line_stats
from forensics.score.tokens import tokenize

FLAG_THRESHOLD = 0.5
OUTPUT_COLUMNS = ("garbage_score", "spam_score", "garbage_reason", "spam_reason")
RULE_COLUMNS = ("garbage_rule", "spam_rule")
_SCHEMA = {
    **dict.fromkeys(("garbage_score", "spam_score"), pl.Float64),
    **dict.fromkeys(("garbage_reason", "spam_reason", *RULE_COLUMNS), pl.Utf8),
}
_EMPTY_GARBAGE = pl.DataFrame(
    schema={"garbage_score": pl.Float64, "garbage_reason": pl.Utf8, "garbage_rule": pl.Utf8}
)
# Rows per batch for the per-document scorers: bounds memory on huge tables and lets the
# progress bar move; the skeleton index always sees the whole table.
BATCH_ROWS = 20_000


def _as_text(column: pl.Series) -> tuple[pl.Series, pl.Series]:
    """Coerce a column to Utf8. Returns (text, note): `note` explains rows that were not text.

    Binary values are decoded as UTF-8 with replacement characters (so broken bytes are scored as
    the garbage they are); numbers, lists and structs become null with a note.
    """
    n = len(column)
    note = pl.Series("note", [""] * n, dtype=pl.Utf8)
    dtype = column.dtype
    if dtype == pl.Utf8:
        return column, note
    if dtype == pl.Null:
        return pl.Series(column.name, [None] * n, dtype=pl.Utf8), note
    if dtype == pl.Binary:
        values = [None if b is None else bytes(b).decode("utf-8", "replace") for b in column]
        return pl.Series(column.name, values, dtype=pl.Utf8), note
    if dtype == pl.Categorical or dtype == pl.Enum:
        return column.cast(pl.Utf8), note
    if dtype == pl.Object:
        values, notes = [], []
        for v in column:
            if isinstance(v, str):
                values.append(_clean_surrogates(v))
                notes.append("")
            elif isinstance(v, bytes | bytearray):
                values.append(bytes(v).decode("utf-8", "replace"))
                notes.append("")
            else:
                values.append(None)
                notes.append("" if v is None else f"non-string value ({type(v).__name__})")
        return pl.Series(column.name, values, dtype=pl.Utf8), pl.Series("note", notes)
    notes = ["" if v is None else f"non-string value ({dtype})" for v in column.to_list()]
    return pl.Series(column.name, [None] * n, dtype=pl.Utf8), pl.Series("note", notes)


def _clean_surrogates(text: str) -> str:
    """Lone surrogates cannot be stored as UTF-8: make each one a U+FFFD (scored as corruption)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


@dataclass
class _Parts:
    """What the per-batch scorers return, gathered batch by batch (row order kept).

    `garbage`: `score_garbage` frames; `spam`: `SpamSignals` per batch; `signatures`: skeleton
    MinHash per batch (tokens are dropped as we go); `clusters`: the skeleton clusters when the
    table is one batch (a future when they run in a thread, else the value).
    """

    garbage: list[pl.DataFrame] = field(default_factory=list)
    spam: list[SpamSignals] = field(default_factory=list)
    signatures: list[Signatures] = field(default_factory=list)
    clusters: Future | SkeletonClusters | None = None

    def skeleton_clusters(self, text_hash: np.ndarray) -> SkeletonClusters:
        """The template clusters of the whole table, whatever the batching."""
        if isinstance(self.clusters, Future):
            return self.clusters.result()
        if self.clusters is not None:
            return self.clusters
        return cluster_signatures(Signatures.concat(self.signatures), text_hash)


def _score_batch(
    batch: pl.Series, parts: _Parts, pool: ThreadPoolExecutor | None, whole: np.ndarray | None
) -> None:
    """Score one batch into `parts`. `whole`: the table's text hashes when this batch is the
    whole table (its skeleton clusters are found right here), else None.

    With a pool: garbage | line statistics in two threads, then (one batch) the skeleton index
    in a thread while this one does tokens, n-grams and keywords. All of them spend most of their
    time in polars, numpy and compiled loops, which release the GIL.
    """
    if pool is None:
        tok = tokenize(batch)
        parts.spam.append(spam_signals(batch, tok))
        parts.garbage.append(score_garbage(batch))
        if whole is not None:
            parts.clusters = find_clusters(tok, whole)
        else:
            parts.signatures.append(Signatures.of(tok))
        return
    pending_garbage = pool.submit(score_garbage, batch)
    pending_lines = pool.submit(line_stats, batch)
    tok = tokenize(batch)
    if whole is not None:
        parts.clusters = pool.submit(find_clusters, tok, whole)
    else:
        pending_signatures = pool.submit(Signatures.of, tok)
    parts.spam.append(spam_signals(batch, tok, pending_lines.result))
    parts.garbage.append(pending_garbage.result())
    if whole is None:
        parts.signatures.append(pending_signatures.result())


def _waive_skeleton(
    texts: pl.Series, clusters: SkeletonClusters, skel_score: np.ndarray, skel_reason: list[str]
) -> None:
    """Clear, in place, the skeleton score and reason of licence and copyright notices (they
    share a skeleton by nature: one licence, other names and years; `licence.py`) and of short
    pages laid out as code (`skeleton.SHORT_MAX_SYMBOLS`)."""
    shared = np.flatnonzero(skel_score > 0)
    waive = shared[is_licence(texts, shared)]
    if clusters.short is not None:
        short = shared[clusters.short[shared]]
        sub = texts.cast(pl.Utf8).gather(short)
        visible = sub.str.replace_all(r"\s", "").str.len_chars().fill_null(0).to_numpy()
        symbols = sub.str.count_matches(SYMBOLS).fill_null(0).to_numpy()
        waive = np.union1d(waive, short[symbols >= SHORT_MAX_SYMBOLS * np.maximum(visible, 1)])
    for i in waive:
        skel_score[i] = 0.0
        skel_reason[i] = ""


def assemble_scores(
    texts: pl.Series,
    garbage: pl.DataFrame,
    spam: SpamSignals,
    clusters: SkeletonClusters,
    keys: bool,
) -> pl.DataFrame:
    """The output columns (see `score_texts`) of `texts` from their per-document scores
    (`garbage`: `score_garbage` rows; `spam`: the spam rules, in row order) and the template
    clusters of the whole table: a page's spam score is the larger of its rules' and its
    skeleton's, with both reasons; an empty text scores 0. Shared by `score_texts` and by the
    parts of a window scored elsewhere (`batches.combine`), so both give one table."""
    skel_score, skel_reason = skeleton_scores(clusters)
    _waive_skeleton(texts, clusters, skel_score, skel_reason)
    score = np.maximum(spam.score, skel_score)
    empty = texts.is_null().to_numpy() | (texts.str.len_chars().fill_null(0).to_numpy() == 0)
    score[empty] = 0.0
    # Both reasons when both fire: an engineer wants to see every way a page is spam.
    pairs = zip(spam.reasons, spam.rules, skel_reason, strict=True)
    reasons, rules = [], []
    for reason, rule, skel in pairs:
        reasons.append("; ".join(r for r in (reason, skel) if r))
        rules.append(";".join(k for k in (rule, "skeleton" if skel else "") if k))
    columns = {
        "garbage_score": garbage["garbage_score"],
        "spam_score": pl.Series(np.clip(score, 0.0, 1.0).astype(np.float64)),
        "garbage_reason": garbage["garbage_reason"],
        "spam_reason": pl.Series(reasons, dtype=pl.Utf8),
    }
    if keys:
        columns["garbage_rule"] = garbage["garbage_rule"]
        columns["spam_rule"] = pl.Series(rules, dtype=pl.Utf8)
    return pl.DataFrame(columns, schema={k: _SCHEMA[k] for k in columns})


def score_texts(
    texts: pl.Series,
    *,
    on_batch: Callable[[int], None] | None = None,
    workers: int | None = None,
    keys: bool = False,
) -> pl.DataFrame:
    """Score a Utf8 series; returns the four output columns, one row per text, order kept.

    `keys`: also `garbage_rule` and `spam_rule`, the machine-readable keys of the rules the
    reasons name (datatrove style: a garbage `Signal` name, "legacy", "mixed_script", ...; a
    spam `Rule` name and/or "skeleton", joined by ";"), "" when not flagged.
    `workers`: more than one lets the scorers of a batch overlap in two more threads
    (`_score_batch`). The skeleton index always sees the whole table.
    """
    texts = texts.cast(pl.Utf8).rename("text")
    text_hash = texts.hash(5).to_numpy()
    threads = workers if workers is not None else (os.cpu_count() or 1)
    single = len(texts) <= BATCH_ROWS
    parts = _Parts()
    pool = ThreadPoolExecutor(max_workers=2) if threads > 1 else None
    try:
        for start in range(0, max(len(texts), 1), BATCH_ROWS):
            batch = texts.slice(start, BATCH_ROWS)
            _score_batch(batch, parts, pool, text_hash if single else None)
            if on_batch is not None:
                on_batch(len(batch))
        clusters = parts.skeleton_clusters(text_hash)
    finally:
        if pool is not None:
            pool.shutdown()

    garbage = pl.concat(parts.garbage) if parts.garbage else _EMPTY_GARBAGE
    return assemble_scores(texts, garbage, SpamSignals.concat(parts.spam), clusters, keys)


def score_table(
    df: pl.DataFrame,
    text_column: str = "text",
    *,
    progress: bool = False,
    workers: int | None = None,
    keys: bool = False,
) -> pl.DataFrame:
    """Return `df` with garbage_score, spam_score, garbage_reason and spam_reason appended.

    Null texts score 0.0 with reason ""; values that are not text score 0.0 with a reason saying
    so (rule key `not_text`). `workers`: threads for scoring (default: one per core; 1 runs the
    scorers one after the other). Native work inside polars uses its own thread pool either way.
    `keys`: also the rule keys `garbage_rule` and `spam_rule` (see `score_texts`), which the
    cluster tables group reasons by.
    Raises ForensicsError if the column is missing or the output columns already exist.
    """
    if text_column not in df.columns:
        raise ForensicsError(
            f"text column '{text_column}' not found; columns are: {', '.join(df.columns)}"
        )
    clash = [c for c in OUTPUT_COLUMNS + (RULE_COLUMNS if keys else ()) if c in df.columns]
    if clash:
        raise ForensicsError(f"input already has score columns {', '.join(clash)}; drop them first")
    if workers is not None and workers < 1:
        raise ForensicsError(f"workers must be >= 1, got {workers}")
    texts, notes = _as_text(df[text_column])

    if progress and len(df) > 0 and _on_terminal():
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task("scoring", total=len(df))
            scores = score_texts(
                texts, on_batch=lambda k: bar.advance(task, k), workers=workers, keys=keys
            )
    else:
        scores = score_texts(texts, workers=workers, keys=keys)
    if (notes != "").any():
        noted = notes != ""
        scores = scores.with_columns(
            garbage_reason=pl.when(noted).then(notes).otherwise(pl.col("garbage_reason"))
        )
        if keys:
            scores = scores.with_columns(
                garbage_rule=pl.when(noted).then(pl.lit("not_text")).otherwise("garbage_rule")
            )
    return pl.concat([df, scores], how="horizontal")


def _on_terminal() -> bool:
    """Whether a progress bar would show: off a terminal it only leaves blank lines."""
    return make_console(stderr=True).is_terminal
