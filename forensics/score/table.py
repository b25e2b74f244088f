"""`score_table`: run every scorer over one text column and attach scores and reasons.

The cross-document skeleton signal needs every row at once, so the table is scored as a whole;
the heavy lifting inside each scorer is polars (native, multi-threaded) and numpy. Only
documents that already carry evidence reach Python-level code (legacy-codec checks, reasons).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import polars as pl

from forensics.errors import ForensicsError

FLAG_THRESHOLD = 0.5
OUTPUT_COLUMNS = ("garbage_score", "spam_score", "garbage_reason", "spam_reason")
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

    With more than one worker, the garbage scorer, the line statistics and (for a table of one
    batch) the skeleton index run in two more threads while this one does tokens and n-grams:
    all spend most of their time in polars and numpy, which release the GIL, so the Python-level
    legacy-codec checks overlap with native work.
    """
    from concurrent.futures import ThreadPoolExecutor

    from forensics.score.garbage import score_garbage
    from forensics.score.skeleton import (
        Signatures,
        cluster_signatures,
        find_clusters,
        skeleton_scores,
    )
    from forensics.score.spam import line_stats, spam_signals
    from forensics.score.tokens import tokenize

    texts = texts.cast(pl.Utf8).rename("text")
    n = len(texts)
    text_hash = texts.hash(5).to_numpy()
    garbage_parts: list[pl.DataFrame] = []
    spam_scores: list[np.ndarray] = []
    spam_reasons: list[str] = []
    spam_rules: list[str] = []
    signature_parts: list[Signatures] = []  # per batch; tokens are dropped as we go
    threads = workers if workers is not None else (os.cpu_count() or 1)
    pool = ThreadPoolExecutor(max_workers=2) if threads > 1 else None
    single = n <= BATCH_ROWS
    pending_clusters = None
    for start in range(0, max(n, 1), BATCH_ROWS):
        batch = texts.slice(start, BATCH_ROWS)
        if pool is not None:
            # Balanced halves: garbage | line statistics, then (one batch) the skeleton index |
            # here: tokens, n-grams and keywords.
            pending_garbage = pool.submit(score_garbage, batch)
            pending_lines = pool.submit(line_stats, batch)
            tok = tokenize(batch)
            if single:
                pending_clusters = pool.submit(find_clusters, tok, text_hash)
            else:
                pending_signatures = pool.submit(Signatures.of, tok)
            score, reasons, values = spam_signals(batch, tok, pending_lines.result)
            garbage_parts.append(pending_garbage.result())
            if not single:
                signature_parts.append(pending_signatures.result())
        else:
            tok = tokenize(batch)
            score, reasons, values = spam_signals(batch, tok)
            garbage_parts.append(score_garbage(batch))
            if not single:
                signature_parts.append(Signatures.of(tok))
        spam_scores.append(score)
        spam_reasons.extend(reasons)
        spam_rules.extend(values["rule"])
        if on_batch is not None:
            on_batch(len(batch))
    if pending_clusters is not None:
        clusters = pending_clusters.result()
    elif single:  # one batch scored without the pool
        clusters = find_clusters(tok, text_hash)
    else:
        # The skeleton index always sees the whole table, whatever the batching.
        clusters = cluster_signatures(Signatures.concat(signature_parts), text_hash)
    if pool is not None:
        pool.shutdown()
    garbage = pl.concat(garbage_parts) if garbage_parts else None
    skel_score, skel_reason = skeleton_scores(clusters)
    per_doc = np.concatenate(spam_scores) if spam_scores else np.zeros(0)
    spam = np.maximum(per_doc, skel_score)
    # Both reasons when both fire: an engineer wants to see every way a page is spam.
    reasons = [
        "; ".join(r for r in (pr, sr) if r)
        for pr, sr in zip(spam_reasons, skel_reason, strict=True)
    ]
    empty = texts.is_null().to_numpy() | (texts.str.len_chars().fill_null(0).to_numpy() == 0)
    spam[empty] = 0.0
    if keys:
        rules = [
            ";".join(k for k in (pr, "skeleton" if sr else "") if k)
            for pr, sr in zip(spam_rules, skel_reason, strict=True)
        ]
        return pl.DataFrame(
            {
                "garbage_score": garbage["garbage_score"] if garbage is not None else [],
                "spam_score": np.clip(spam, 0.0, 1.0).astype(np.float64),
                "garbage_reason": garbage["garbage_reason"] if garbage is not None else [],
                "spam_reason": pl.Series(reasons, dtype=pl.Utf8),
                "garbage_rule": garbage["garbage_rule"] if garbage is not None else [],
                "spam_rule": pl.Series(rules, dtype=pl.Utf8),
            },
            schema={**dict.fromkeys(("garbage_score", "spam_score"), pl.Float64),
                    **dict.fromkeys(("garbage_reason", "spam_reason", "garbage_rule",
                                     "spam_rule"), pl.Utf8)},
        )  # fmt: skip
    return pl.DataFrame(
        {
            "garbage_score": garbage["garbage_score"] if garbage is not None else [],
            "spam_score": np.clip(spam, 0.0, 1.0).astype(np.float64),
            "garbage_reason": garbage["garbage_reason"] if garbage is not None else [],
            "spam_reason": pl.Series(reasons, dtype=pl.Utf8),
        },
        schema={
            "garbage_score": pl.Float64,
            "spam_score": pl.Float64,
            "garbage_reason": pl.Utf8,
            "spam_reason": pl.Utf8,
        },
    )


def score_table(
    df: pl.DataFrame,
    text_column: str = "text",
    *,
    progress: bool = False,
    workers: int | None = None,
) -> pl.DataFrame:
    """Return `df` with garbage_score, spam_score, garbage_reason and spam_reason appended.

    Null texts score 0.0 with reason ""; values that are not text score 0.0 with a reason saying
    so. `workers`: threads for scoring (default: one per core; 1 runs the scorers one after the
    other). Native work inside polars uses its own thread pool either way.
    Raises ForensicsError if the column is missing or the output columns already exist.
    """
    if text_column not in df.columns:
        raise ForensicsError(
            f"text column '{text_column}' not found; columns are: {', '.join(df.columns)}"
        )
    clash = [c for c in OUTPUT_COLUMNS if c in df.columns]
    if clash:
        raise ForensicsError(f"input already has score columns {', '.join(clash)}; drop them first")
    if workers is not None and workers < 1:
        raise ForensicsError(f"workers must be >= 1, got {workers}")
    texts, notes = _as_text(df[text_column])

    if progress and len(df) > 0:
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task("scoring", total=len(df))
            scores = score_texts(texts, on_batch=lambda k: bar.advance(task, k), workers=workers)
    else:
        scores = score_texts(texts, workers=workers)
    if (notes != "").any():
        scores = scores.with_columns(
            garbage_reason=pl.when(notes != "").then(notes).otherwise(pl.col("garbage_reason"))
        )
    return pl.concat([df, scores], how="horizontal")
