"""Documents that decode to nonsense, seen from their token ids against the baseline's, with no
checkpoint: one more document rule beside the text scorers (which know mojibake, template spam
and repeated n-grams, and read text that looks like language).

Per document, from its token ids and the run's tokenizer:
- round trip: whether the ids are the tokenizer's own encoding of their decoded text
  (forensics.spike.tokcheck.round_trips). Text the preprocessing tokenized always is (byte-level
  BPE, SentencePiece: 100% of sequences measured in tokcheck); ids written by another tokenizer
  decode to word salad that re-encodes to other ids. Counted only where the baseline's own
  documents round-trip (>= MIN_BASELINE_ROUND_TRIP of them): a tokenizer that does not
  normalise back to itself gives no signal.
- unigram surprisal: the mean -log2 probability of its tokens under the baseline documents'
  unigram distribution (add-half smoothing over the vocabulary), the per-document form of the
  unigram divergence from the baseline.
- bytes per token: the decoded text's UTF-8 bytes over its ids. A numeric dump tokenizes into
  single digits and signs, far below the baseline's language.
- rare-token share: its ids the baseline never drew (reported, not a rule on its own).

A document is flagged when it does not round-trip, or when its surprisal or its bytes per token
lies ROBUST_Z robust standard deviations (1.4826 MAD) beyond the median of the reference
documents: the reference documents of its own dataset where there are at least MIN_REFERENCE of
them, else all of them. The reference (`token_reference`) is a fixed, seeded set: per dataset
the baseline's REFERENCE_DOCS documents with the smallest permanent random number
(forensics.cluster.sample), all of them where the baseline holds fewer. It also makes the
unigram distribution. Because it does not depend on which documents are scored, a document is
flagged or not the same way when every document is scored (--exhaustive) and when a sample is
(the evidence passes score the reference with their sample). A flagged document gets
garbage_score 1.0, the reason and the rule key TOKENS_RULE (as forensics.spike.repeats does), so
it counts as flagged wherever the spike reads the scores.

What it cannot see: text in another language the baseline does not hold reads as improbable
(surprisal) and may be flagged; comparing with the dataset's own baseline documents keeps a
language the baseline already holds from it. Dirt that is fluent text (boilerplate, duplicates)
is not this rule's: the text scorers and the model's view see those.

No library computes these against a run's own baseline window: datatrove's UnigramLogProbFilter
scores English words against a downloaded Google n-gram list; the statistics here are a few
numpy lines over the run's own tokenizer (tokenizers' decode/encode).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from dataloaders.atomic import atomic_path, write_parquet_atomic
from dataloaders.mapped_pages import released_chunks, releasing_pages
from forensics.cluster.sample import permanent_random
from forensics.errors import ForensicsError
from forensics.pipeline import cached_table, module_version
from forensics.spike.drawn import drawn_scan
from forensics.spike.run_context import SpikeRun
from forensics.spike.tokcheck import round_trips_batch, special_ids

TOKENS_RULE = "token_stats"
ROBUST_Z = 5.0  # a statistic this many robust sds beyond the reference median flags the document
MIN_REFERENCE = 50  # baseline documents of a dataset needed to be its own reference
MIN_TOKENS = 32  # shorter documents are not judged by the distribution rules (too noisy)
MIN_BASELINE_ROUND_TRIP = 0.95  # the baseline's round-trip share needed for that rule to count
REFERENCE_DOCS = 2_000  # baseline documents per dataset in the rule's reference
STATS_SCHEMA = {
    "dataset": pl.Utf8,
    "doc_id": pl.Int64,
    "n_tokens": pl.Int64,
    "bytes_per_token": pl.Float64,
    "unigram_bits": pl.Float64,
    "rare_token_share": pl.Float64,
    "round_trip": pl.Boolean,
    "token_reason": pl.Utf8,
}


STATS_CHUNK = 4096  # documents whose ids are held (as int64 and as lists) at a time
_STATS = ("n_tokens", "bytes_per_token", "unigram_bits", "rare_token_share", "round_trip")


def _id_chunks(
    tokens: list[np.ndarray], drop: np.ndarray
) -> Iterator[tuple[int, list[np.ndarray]]]:
    """`tokens` copied to int64 STATS_CHUNK documents at a time, the special ids `drop` left
    out: views of the mapped data are never copied at once."""
    for lo in range(0, len(tokens), STATS_CHUNK):
        rows = [np.asarray(t, dtype=np.int64) for t in tokens[lo : lo + STATS_CHUNK]]
        yield lo, [r[~np.isin(r, drop)] if drop.size else r for r in rows]


def _special_array(tokenizer: Any) -> tuple[set[int], np.ndarray]:
    special = special_ids(tokenizer)
    return special, (np.fromiter(special, dtype=np.int64) if special else np.empty(0, np.int64))


def unigram_counts(tokenizer: Any, tokens: list[np.ndarray], vocab: int) -> np.ndarray:
    """How often each id (0..vocab-1; ids past it are left out) occurs in `tokens`, the
    special ids left out: the reference's unigram distribution before smoothing."""
    _, drop = _special_array(tokenizer)
    counts = np.zeros(vocab, dtype=np.float64)
    for _, rows in _id_chunks(tokens, drop):
        ids = np.concatenate(rows) if rows else np.empty(0, np.int64)
        counts += np.bincount(ids[ids < vocab], minlength=vocab)[:vocab]
    return counts


def per_document_stats(
    tokenizer: Any, tokens: list[np.ndarray], counts: np.ndarray
) -> dict[str, np.ndarray]:
    """n_tokens, bytes_per_token, unigram_bits, rare_token_share, round_trip per document of
    `tokens`, against the reference's unigram `counts` (add-half smoothing over its
    vocabulary; an id past it is as improbable as one the reference never drew). A document's
    figures depend on its ids and the reference only, never on which other documents are
    computed with it."""
    special, drop = _special_array(tokenizer)
    unseen = -np.log2(0.5 / (counts.sum() + 0.5 * counts.size))
    bits = np.append(-np.log2((counts + 0.5) / (counts.sum() + 0.5 * counts.size)), unseen)
    seen = np.append(counts > 0, False)
    parts = [
        _chunk_stats(tokenizer, rows, special, bits, seen) for _, rows in _id_chunks(tokens, drop)
    ]
    empty = {k: np.zeros(0, dtype=np.int64 if k == "n_tokens" else np.float64) for k in _STATS}
    return {k: np.concatenate([p[k] for p in parts]) for k in _STATS} if parts else empty


def document_token_stats(
    tokenizer: Any, tokens: list[np.ndarray], baseline: np.ndarray, vocab: int
) -> dict[str, np.ndarray]:
    """`per_document_stats` of `tokens` against the unigram distribution of those `baseline`
    marks."""
    reference = [t for t, is_base in zip(tokens, baseline, strict=True) if is_base]
    return per_document_stats(tokenizer, tokens, unigram_counts(tokenizer, reference, vocab))


def _chunk_stats(
    tokenizer: Any, rows: list[np.ndarray], special: set[int], bits: np.ndarray, seen: np.ndarray
) -> dict[str, np.ndarray]:
    """`per_document_stats`' columns for one chunk of documents (ids without specials); ids
    past the reference's vocabulary read its last entry (`bits`, `seen`: one longer)."""
    texts = tokenizer.decode_batch([r.tolist() for r in rows], skip_special_tokens=False)
    n = np.array([r.size for r in rows], dtype=np.int64)
    nbytes = np.array([len(t.encode("utf-8", "surrogatepass")) for t in texts], dtype=np.float64)
    top = bits.size - 1
    capped = [np.minimum(r, top) for r in rows]
    return {
        "n_tokens": n,
        "bytes_per_token": nbytes / np.maximum(n, 1),
        "unigram_bits": np.array([bits[r].mean() if r.size else 0.0 for r in capped]),
        "rare_token_share": np.array([(~seen[r]).mean() if r.size else 0.0 for r in capped]),
        "round_trip": round_trips_batch(tokenizer, [r.tolist() for r in rows], special),
    }


def robust_z(values: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """(values - median) / (1.4826 MAD) of the reference; 0 where the reference has no spread."""
    if reference.size == 0:
        return np.zeros_like(values)
    mid = float(np.median(reference))
    spread = 1.4826 * float(np.median(np.abs(reference - mid)))
    if spread <= 0:
        return np.zeros_like(values)
    return (values - mid) / spread


def token_reasons(stats: pl.DataFrame, baseline: np.ndarray) -> list[str]:
    """The rule's reason per document ("" when not flagged)."""
    datasets = stats["dataset"].to_numpy()
    n = stats["n_tokens"].to_numpy()
    rt = stats["round_trip"].to_numpy()
    check_rt = baseline.any() and rt[baseline].mean() >= MIN_BASELINE_ROUND_TRIP
    reasons = [""] * stats.height
    z = {c: np.zeros(stats.height) for c in ("unigram_bits", "bytes_per_token")}
    for name in np.unique(datasets):
        mine = datasets == name
        ref = baseline & mine if (baseline & mine).sum() >= MIN_REFERENCE else baseline
        ref = ref & (n >= MIN_TOKENS)
        for col in z:
            values = stats[col].to_numpy()
            z[col][mine] = robust_z(values[mine], values[ref])
    for i in range(stats.height):
        parts = []
        if check_rt and not rt[i]:
            parts.append("token ids do not re-encode to themselves (another tokenizer's ids?)")
        if n[i] >= MIN_TOKENS and z["unigram_bits"][i] >= ROBUST_Z:
            parts.append(
                f"tokens improbable under the baseline's unigrams ({stats['unigram_bits'][i]:.1f}"
                f" bits/token, robust z {z['unigram_bits'][i]:+.0f})"
            )
        if n[i] >= MIN_TOKENS and abs(z["bytes_per_token"][i]) >= ROBUST_Z:
            parts.append(
                f"{stats['bytes_per_token'][i]:.2f} bytes per token (robust z "
                f"{z['bytes_per_token'][i]:+.0f} against the baseline's)"
            )
        reasons[i] = "; ".join(parts)
    return reasons


def run_tokenizer(replayer: Any) -> Any:
    """The run's tokenizer (a `tokenizers.Tokenizer`), or None where the family has none to
    give (the rule then needs what it cannot have: the decoded text and the round trip)."""
    get = getattr(replayer, "tokenizer", None)
    if get is None:
        return None
    try:
        tokenizer = get()
    except (ForensicsError, OSError, ValueError):
        return None
    return tokenizer if hasattr(tokenizer, "decode_batch") else None


def token_reference(drawn: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """dataset, doc_id of the rule's reference (module docstring) among `drawn` (side,
    dataset, doc_id: forensics.spike.drawn.drawn_documents); a scan reads only the baseline's
    rows."""
    baseline = drawn.lazy().filter(pl.col("side") == "baseline").select("dataset", "doc_id")
    baseline = baseline.collect()
    first = pl.col("_u").rank("ordinal").over("dataset") <= REFERENCE_DOCS
    return (
        baseline.with_columns(permanent_random(baseline))
        .filter(first)
        .select("dataset", pl.col("doc_id").cast(pl.Int64))
        .sort("dataset", "doc_id")
    )


def reference_documents(run: SpikeRun, replay: pl.LazyFrame) -> pl.DataFrame:
    """`token_reference` of the documents the sides drew, kept in the stage cache
    (tokrefdocs-<key>-<s>.parquet): each round of the passes reads these few thousand rows,
    not the millions of the sides' table."""
    name = f"tokrefdocs-{run.key}-{module_version('forensics.spike')}.parquet"
    return cached_table(
        run.cache / name,
        lambda: token_reference(drawn_scan(run, replay)),
        run.hits,
        "token reference",
    )


def token_table(
    run: SpikeRun,
    replay: pl.LazyFrame,
    distinct: pl.DataFrame,
    computed: list[Path] | None = None,
) -> pl.DataFrame:
    """STATS_SCHEMA for every distinct document (empty when the family cannot list token ids);
    `computed`: the parts' tables of figures (`raw_token_stats`)."""
    replayer = run.replayer
    if not replayer.document_token_ids or distinct.height == 0:
        return pl.DataFrame(schema=STATS_SCHEMA)
    reference = reference_documents(run, replay)
    keyed = distinct.select("dataset", pl.col("doc_id").cast(pl.Int64))
    baseline = (
        keyed.join(
            reference.with_columns(pl.lit(True).alias("_b")),
            on=["dataset", "doc_id"],
            how="left",
            maintain_order="left",
        )["_b"]
        .fill_null(False)
        .to_numpy()
    )
    tokenizer = run_tokenizer(replayer)
    if tokenizer is None:
        return pl.DataFrame(schema=STATS_SCHEMA)
    table = raw_token_stats(run, tokenizer, reference, keyed, computed)
    return table.with_columns(
        pl.Series("token_reason", token_reasons(table, baseline), dtype=pl.Utf8)
    ).cast(STATS_SCHEMA)  # type: ignore[arg-type]


@releasing_pages
def raw_token_stats(
    run: SpikeRun,
    tokenizer: Any,
    reference: pl.DataFrame,
    keyed: pl.DataFrame,
    computed: list[Path] | None = None,
) -> pl.DataFrame:
    """dataset, doc_id and `per_document_stats`' columns for each row of `keyed`, in its order.
    A document's figures depend only on its ids and the run's fixed reference, so they are kept
    for the run (tokraw-<key>.parquet) and each is computed once: the evidence passes' rounds,
    and warm reruns, compute only the documents not seen yet. `computed`: tables the parts'
    workers wrote (`part_token_stats`), read instead of computing their documents here."""
    replayer = run.replayer
    stored = run.cache / f"tokraw-{run.key}-{module_version('forensics.spike')}.parquet"
    tables = [pl.read_parquet(f) for f in [stored, *(computed or [])] if f.is_file()]
    known = (
        pl.concat(tables, how="vertical_relaxed").unique(["dataset", "doc_id"]) if tables else None
    )
    missing = keyed if known is None else keyed.join(known, on=["dataset", "doc_id"], how="anti")
    if missing.height:
        counts = reference_counts(replayer, tokenizer, reference)
        stats = [
            per_document_stats(tokenizer, replayer.document_tokens(chunk), counts)
            for chunk in released_chunks(missing)
        ]
        fresh = missing.with_columns(
            *[pl.Series(k, np.concatenate([s[k] for s in stats])) for k in _STATS]
        )
        known = fresh if known is None else pl.concat([known, fresh], how="vertical_relaxed")
    assert known is not None
    if missing.height or len(tables) > 1:
        write_parquet_atomic(known, stored)
    return keyed.join(known, on=["dataset", "doc_id"], how="left", maintain_order="left")


def reference_counts(replayer: Any, tokenizer: Any, reference: pl.DataFrame) -> np.ndarray:
    """`unigram_counts` of the `reference` documents, read a chunk at a time."""
    counts = np.zeros(replayer.vocab_size(), dtype=np.float64)
    for chunk in released_chunks(reference):
        counts += unigram_counts(tokenizer, replayer.document_tokens(chunk), counts.size)
    return counts


@releasing_pages
def reference_unigrams_file(run: SpikeRun, replay: pl.LazyFrame) -> Path | None:
    """The reference's unigram counts (tokref-<key>.npy) for the parts' workers to compute
    their documents' figures with (`part_token_stats`); None where the rule cannot run."""
    replayer = run.replayer
    tokenizer = run_tokenizer(replayer) if replayer.document_token_ids else None
    if tokenizer is None:
        return None
    path = run.cache / f"tokref-{run.key}-{module_version('forensics.spike')}.npy"
    if not path.is_file():
        reference = reference_documents(run, replay)
        counts = reference_counts(replayer, tokenizer, reference)
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            np.save(fh, counts)
    return path


def part_token_stats(replayer: Any, keys: pl.DataFrame, unigrams: Path, out: Path) -> None:
    """Worker: `per_document_stats` of a part's documents against the reference's unigram
    counts (`reference_unigrams_file`), written to `out`."""
    tokenizer = run_tokenizer(replayer)
    if tokenizer is None:
        return
    keyed = keys.select("dataset", pl.col("doc_id").cast(pl.Int64))
    stats = per_document_stats(tokenizer, replayer.document_tokens(keyed), np.load(unigrams))
    write_parquet_atomic(keyed.with_columns(*[pl.Series(k, v) for k, v in stats.items()]), out)


def flag_tokens(scored: pl.DataFrame, stats: pl.DataFrame) -> pl.DataFrame:
    """`scored` with the token statistics as columns, and the documents the rule flags marked
    as garbage (score 1.0, reason and rule key appended). Row order is kept."""
    if stats.height == 0:
        return scored
    joined = scored.join(stats, on=["dataset", "doc_id"], how="left", maintain_order="left")
    flagged = pl.col("token_reason").fill_null("") != ""

    def appended(column: str, value: pl.Expr, sep: str) -> pl.Expr:
        old = pl.col(column).fill_null("")
        both = pl.when(old == "").then(value).otherwise(old + sep + value)
        return pl.when(flagged).then(both).otherwise(pl.col(column)).alias(column)

    extra = [appended("garbage_reason", pl.col("token_reason"), "; ")]
    if "garbage_rule" in scored.columns:
        extra.append(appended("garbage_rule", pl.lit(TOKENS_RULE), ";"))
    return joined.with_columns(
        pl.when(flagged).then(1.0).otherwise(pl.col("garbage_score")).alias("garbage_score"),
        *extra,
    ).drop("token_reason")


def token_stage(
    run: SpikeRun,
    replay: pl.LazyFrame,
    distinct: pl.DataFrame,
    scored: pl.DataFrame,
    key: str | None = None,
    computed: list[Path] | None = None,
) -> pl.DataFrame:
    """The scored documents with the token rule applied (its table cached beside the scores,
    keyed by the rule's source and `key`: the run's, or the scored set's); `computed`: the
    parts' tables of figures (`raw_token_stats`)."""
    if not run.replayer.document_token_ids or run_tokenizer(run.replayer) is None:
        run.notes.append(
            "token statistics were not checked: this data family cannot list a document's ids "
            "or give the run's tokenizer"
        )
        return scored
    name = f"tokstats-{key or run.key}-{module_version('forensics.spike')}.parquet"
    with run.clock.stage("tokens", f"{distinct.height:,} documents against the baseline's"):
        table = cached_table(
            run.cache / name,
            lambda: token_table(run, replay, distinct, computed),
            run.hits,
            "tokens",
        )
    return flag_tokens(scored, table)
