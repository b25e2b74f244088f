"""Cross-document template detection: near-duplicate *skeletons* across the scored table.

A slot-filled SEO page ("Best plumber in Austin ... our Austin team ...") reads fine alone; what
gives it away is that 200 other pages in the same batch share its skeleton. The skeleton of a
text is its word sequence with the usual slot fillers masked (capitalised words -> X, words with
digits -> 0, and the page's own slot words -> S: a lowercase content word the page repeats at
>= 3% of its words, such as the product of a farm page; see `tokens.SLOT_SHARE`), so pages that
differ only in names, places, products, prices and phone numbers get the same skeleton shingles.

Scaling: one-permutation MinHash (a single hash per shingle, binned into `BINS` buckets, minimum
per bucket) computed for all documents at once with polars group-bys, then banded LSH: documents
that agree on every bin of some band become candidates, candidates are verified against the
band's first member by estimated Jaccard, and connected components of verified pairs are the
template clusters. No all-pairs comparison; cost is linear in the number of shingles.
We hand-wrote this instead of using datasketch's `MinHash`/`MinHashLSH` because those build one
Python object per document (hundreds of microseconds each), which alone would exceed our whole
per-document budget; the estimator and banding are the same.

Calibration: legitimate pages share boilerplate (licence headers, README templates) but rarely
with the whole document; a cluster is template spam when at least `MIN_CLUSTER` *distinct* texts
share a skeleton at estimated Jaccard >= `MIN_JACCARD`. Exact copies count once: duplicates are a
dedup problem, not a template.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

from forensics.score.doc_counts import doc_bounds, minhash, pair_jaccard
from forensics.score.tokens import Tokens

SHINGLE = 3  # words per skeleton shingle: short, so one slot breaks few shingles
BINS = 128  # one-permutation MinHash bins
ROWS = 4  # bins per LSH band (32 bands): P(candidate | J=0.5) ~ 0.87, J=0.3 ~ 0.23
MIN_SHINGLES = 30  # documents with fewer shingles are "short" (see SHORT_MIN_CLUSTER)
# Short pages (a 50-200 character product or city stub) have a skeleton of 8-30 shingles: enough
# to match a farm's other pages exactly, too few to tell a template from a common short phrase
# pattern in a small group, so their cluster must be larger before it is called a template.
SHORT_MIN_SHINGLES = 8
SHORT_MIN_CLUSTER = 30
# Generated reference stubs (f2py signatures, a docstring template's examples) are short, share
# a skeleton and differ in names and numbers too, but are laid out as code: a short page counts
# as a template only below this symbol density (`code.SYMBOLS` per visible character; the range
# `code.py` gives for template and doorway pages, against 6-20% for code).
SHORT_MAX_SYMBOLS = 0.06
MIN_JACCARD = 0.5
# Skeleton Jaccard minus raw-word Jaccard of a pair: how much the slots vary between the pages.
MIN_VARIATION = 0.1
# Pages whose raw words are this similar are copies (mirrors, a counter or date changed), which
# is a deduplication matter; a template's slots change a larger share of its words.
MAX_RAW_JACCARD = 0.8
# The slots of a template change its pages' words throughout, so across a farm's links the
# skeletons agree clearly more than the words do (median of skeleton minus raw-word Jaccard
# 0.3-0.6 on the evaluation sets' farms and the demo's spun farm). Pages that share a block of one
# text (one package's man-page footer, a translation team's header) and differ in their bodies
# agree in skeleton barely more than in words (median 0.10-0.16, each link just past
# MIN_VARIATION): a cluster whose median link varies less than this is shared boilerplate.
MIN_TEMPLATE_VARIATION = 0.2
MIN_CLUSTER = 10  # distinct documents sharing one skeleton before it is called a template
FULL_CLUSTER = 50  # cluster size at which the score saturates
_EMPTY = np.iinfo(np.uint64).max


@dataclass(frozen=True)
class SkeletonClusters:
    """Per document: `cluster` int64 (-1: none), `size` int64 (distinct texts in its cluster),
    `short` bool (fewer than MIN_SHINGLES shingles: judged against SHORT_MIN_CLUSTER)."""

    cluster: np.ndarray
    size: np.ndarray
    short: np.ndarray | None = None


def signatures(
    tok: Tokens, words: np.ndarray | None = None, only: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One-permutation MinHash of each document's skeleton shingles (or of `words` shingles).

    `only`: bool [n_docs], compute just these documents (the rest stay empty).
    Returns (sig, eligible, kept): `sig` uint64 [n_docs, BINS], the minimum shingle hash per
    bin (`_EMPTY` where a bin got none); `eligible` bool [n_docs], documents with >=
    SHORT_MIN_SHINGLES informative shingles; `kept` int64 [n_docs], their count. A shingle of
    masks only ("X X 0 X X") is a list of names or numbers, not template text, and is skipped.
    Duplicate shingles need no removal: a minimum ignores repeats. Shingle hashes are
    `doc_counts.MIX`'s n-gram hashes, binned in one compiled pass.
    """
    bounds = tok.bounds if tok.bounds is not None else doc_bounds(tok.doc, tok.n_docs)
    sig, kept = minhash(
        bounds,
        tok.skel if words is None else words,
        tok.masked.astype(np.int64),
        np.ones(tok.n_docs, dtype=bool) if only is None else only,
        SHINGLE, BINS, SHORT_MIN_SHINGLES, _EMPTY,
    )  # fmt: skip
    return sig, kept >= SHORT_MIN_SHINGLES, kept


BANDS = BINS // ROWS
_MIX = np.uint64(0x9E3779B97F4A7C15)


@dataclass(frozen=True)
class Bands:
    """The LSH bands of some documents' skeleton signatures: `key` uint64 [BANDS, n], one hash
    of each band's ROWS bins, and `filled` bool [BANDS, n], whether any bin of the band holds a
    shingle (a band of empty bins carries no evidence). 288 bytes a document against the 2 KB
    of both signatures: the candidates come from these, the signatures are read only for the
    documents some candidate pair holds."""

    key: np.ndarray
    filled: np.ndarray

    @staticmethod
    def of(skeleton: np.ndarray) -> Bands:
        """The bands of `skeleton` uint64 [n, BINS]."""
        key = np.zeros((BANDS, len(skeleton)), dtype=np.uint64)
        filled = np.empty((BANDS, len(skeleton)), dtype=bool)
        with np.errstate(over="ignore"):
            for band in range(BANDS):
                block = skeleton[:, band * ROWS : (band + 1) * ROWS]
                for j in range(ROWS):
                    key[band] = (key[band] ^ block[:, j]) * _MIX + np.uint64(j + 1)
                filled[band] = (block != _EMPTY).any(axis=1)
        return Bands(key, filled)

    @staticmethod
    def concat(parts: list[Bands]) -> Bands:
        if not parts:
            return Bands.of(np.zeros((0, BINS), dtype=np.uint64))
        return Bands(
            np.concatenate([p.key for p in parts], axis=1),
            np.concatenate([p.filled for p in parts], axis=1),
        )


def _band_edges(key: np.ndarray, filled: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Candidate pairs among the documents of one band (`Bands`: its `key` and `filled`) that
    agree on every bin: each row is linked to the first row with the same values and to the
    row before it (in a stable order). Rows whose bins are all empty carry no evidence.

    Why both: a pair is kept only if it passes the copy and variation checks, and when every
    candidate of a page was the group's first row, one near-copy at the head of the group cut
    the page off from all of its template (its skeleton Jaccard 1.0 with 49 other pages).
    """
    rows = np.flatnonzero(filled)
    order = rows[np.argsort(key[rows], kind="stable")]
    sk = key[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = sk[1:] != sk[:-1]
    head = order[np.maximum.accumulate(np.where(new, np.arange(len(order)), 0))]
    member = np.flatnonzero(~new)
    return (
        np.concatenate([head[member], order[member - 1]]),
        np.concatenate([order[member], order[member]]),
    )


def _jaccard(sig: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Estimated Jaccard for pairs (a[i], b[i]): equal bins among bins filled in either
    (forensics.score.doc_counts.pair_jaccard: one compiled pass over the pairs)."""
    sig = np.ascontiguousarray(sig, dtype=np.uint64)
    pairs = (np.ascontiguousarray(a, dtype=np.int64), np.ascontiguousarray(b, dtype=np.int64))
    return pair_jaccard(sig, *pairs, _EMPTY)


@dataclass(frozen=True)
class Signatures:
    """What the clustering needs of each document, so tokens can be dropped batch by batch.

    `skeleton` uint64 [n, BINS] MinHash of the skeleton shingles, `eligible` bool [n] (enough
    shingles), `raw` uint64 [n, BINS] MinHash of the raw-word shingles (the copy check),
    `short` bool [n] (eligible with fewer than MIN_SHINGLES shingles).
    About 2 KB a document, against ~25 bytes a token for the tokens themselves.
    """

    skeleton: np.ndarray
    eligible: np.ndarray
    raw: np.ndarray
    short: np.ndarray

    @staticmethod
    def of(tok: Tokens) -> Signatures:
        skeleton, eligible, kept = signatures(tok)
        raw, _, _ = signatures(tok, tok.hash, only=eligible)
        short = eligible & (kept < MIN_SHINGLES)
        return Signatures(skeleton, eligible, raw, short)

    @staticmethod
    def concat(parts: list[Signatures]) -> Signatures:
        return Signatures(
            np.concatenate([p.skeleton for p in parts]),
            np.concatenate([p.eligible for p in parts]),
            np.concatenate([p.raw for p in parts]),
            np.concatenate([p.short for p in parts]),
        )


def find_clusters(tok: Tokens, text_hash: np.ndarray) -> SkeletonClusters:
    """Connected components of documents whose skeletons are near-duplicates (banded LSH)."""
    return cluster_signatures(Signatures.of(tok), text_hash)


def cluster_signatures(sigs: Signatures, text_hash: np.ndarray) -> SkeletonClusters:
    """Template clusters from per-document signatures (see `find_clusters`)."""
    docs = np.flatnonzero(sigs.eligible)

    def rows(kind: str, at: np.ndarray) -> np.ndarray:
        return (sigs.skeleton if kind == "skeleton" else sigs.raw)[docs[at]]

    bands = Bands.of(sigs.skeleton[docs]) if len(docs) >= 2 else Bands.concat([])
    return cluster_bands(bands, sigs.eligible, sigs.short, text_hash, rows)


SignatureRows = Callable[[str, np.ndarray], np.ndarray]


def cluster_bands(
    bands: Bands,
    eligible: np.ndarray,
    short: np.ndarray,
    text_hash: np.ndarray,
    rows: SignatureRows,
) -> SkeletonClusters:
    """`cluster_signatures` from the eligible documents' `bands` and `rows(kind, at)`: the
    "skeleton" or "raw" signatures [len(at), BINS] of the eligible documents at `at` (sorted
    positions among the eligible), read only for the documents a candidate pair holds. The
    scored parts of a production window hold millions of documents; their signatures whole
    are 2 KB each (forensics.spike.parts reads them part by part)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n = len(eligible)
    cluster = np.full(n, -1, dtype=np.int64)
    size = np.zeros(n, dtype=np.int64)
    docs = np.flatnonzero(eligible)
    if len(docs) < 2:
        return SkeletonClusters(cluster, size)
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
    for band in range(BANDS):
        a, b = _band_edges(bands.key[band], bands.filled[band])
        if len(a):
            src.append(a)
            dst.append(b)
    if not src:
        return SkeletonClusters(cluster, size)
    a = np.concatenate(src)
    b = np.concatenate(dst)
    del src, dst
    # Distinct pairs, in (a, b) order: one int64 key per pair (np.unique over rows sorts
    # structured values and cost a second per 20,000 documents).
    n_sub = np.int64(len(docs))
    keys = distinct_sorted(a.astype(np.int64) * n_sub + b)
    pairs = np.stack([keys // n_sub, keys % n_sub], axis=1)
    sim = _jaccard_of(rows, "skeleton", pairs)
    pairs, sim = pairs[sim >= MIN_JACCARD], sim[sim >= MIN_JACCARD]
    if len(pairs):
        # Slot-filled variation: the raw words must differ clearly more than the skeletons do,
        # and differ at all. Copies of one licence or README share raw text as much as
        # skeleton: not a template.
        raw_sim = _jaccard_of(rows, "raw", pairs)
        keep = (sim - raw_sim >= MIN_VARIATION) & (raw_sim <= MAX_RAW_JACCARD)
        pairs, variation = pairs[keep], (sim - raw_sim)[keep]
    else:
        variation = sim
    graph = coo_matrix(
        (np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(len(docs), len(docs))
    )
    _, labels = connected_components(graph, directed=False)
    labels = _drop_shared_blocks(labels, pairs, variation)
    # Cluster size counts distinct texts: exact copies are one document for this purpose.
    sizes = (
        pl.DataFrame({"label": labels, "t": text_hash[docs]})
        .group_by("label")
        .agg(distinct=pl.col("t").n_unique())
    )
    distinct = np.zeros(labels.max() + 2, dtype=np.int64)
    distinct[sizes["label"].to_numpy()] = sizes["distinct"].to_numpy()
    distinct[-1] = 0  # label -1: a page of a shared-block cluster, in no template
    cluster[docs] = labels
    size[docs] = distinct[labels]
    return SkeletonClusters(cluster, size, short)


def _jaccard_of(rows: SignatureRows, kind: str, pairs: np.ndarray) -> np.ndarray:
    """`_jaccard` of `pairs` (positions among the eligible documents) on the `kind` signatures
    of just the documents the pairs hold."""
    if not len(pairs):
        return np.zeros(0, dtype=np.float64)
    held = distinct_sorted(pairs.ravel())
    local = np.searchsorted(held, pairs)
    return _jaccard(rows(kind, held), local[:, 0], local[:, 1])


def distinct_sorted(values: np.ndarray) -> np.ndarray:
    """np.unique(values) for int64 `values`, by polars' hash-based unique and a sort of what
    is left: the candidate pairs of a production window's templates are tens of millions of
    mostly repeated keys, where np.unique's sort of all of them took 30 s (polars: 2 s)."""
    return pl.Series(values, dtype=pl.Int64).unique().sort().to_numpy()


def _drop_shared_blocks(labels: np.ndarray, pairs: np.ndarray, variation: np.ndarray) -> np.ndarray:
    """`labels` with -1 for the pages of every component whose verified links have a median
    `variation` (skeleton minus raw-word Jaccard) under MIN_TEMPLATE_VARIATION (see there):
    linked by a shared block, not filled from one template."""
    if len(pairs) == 0:
        return labels
    links = pl.DataFrame({"label": labels[pairs[:, 0]], "variation": variation})
    weak = (
        links.group_by("label")
        .agg(pl.col("variation").median())
        .filter(pl.col("variation") < MIN_TEMPLATE_VARIATION)["label"]
        .to_numpy()
    )
    if len(weak) == 0:
        return labels
    return np.where(np.isin(labels, weak), -1, labels)


def skeleton_scores(clusters: SkeletonClusters) -> tuple[np.ndarray, list[str]]:
    """Score from cluster size: 0.5 at MIN_CLUSTER distinct texts (SHORT_MIN_CLUSTER for a
    short page), 1.0 at FULL_CLUSTER (or the short minimum, if larger)."""
    s = clusters.size.astype(float)
    short = clusters.short if clusters.short is not None else np.zeros(len(s), dtype=bool)
    low = np.where(short, SHORT_MIN_CLUSTER, MIN_CLUSTER).astype(float)
    full = np.maximum(FULL_CLUSTER, low + 1)
    score = np.where(
        s >= low,
        0.5 + 0.5 * np.clip((s - low) / (full - low), 0, 1),
        np.where(s >= 2, 0.45 * s / low, 0.0),
    )
    reasons = [
        f"skeleton shared with {int(k) - 1} other documents (template with slot-filled variation)"
        if sc >= 0.5
        else ""
        for sc, k in zip(score, clusters.size, strict=True)
    ]
    return score, reasons
