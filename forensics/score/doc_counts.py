"""Per-document counts over the flat word arrays, compiled (numba, cached on disk).

Why: the spam and template signals ask "how often does this word / n-gram occur *in its own
document*" about every word. As whole-column polars group-bys that is one hash table over tens
of millions of salted hashes per question (five n-gram sizes, content words, slot words, MinHash
bins): 60% of the scoring CPU time. Documents are contiguous runs of the flat arrays, so a loop
that keeps one small open-addressing table per document (a few hundred entries, in cache) answers
the same questions at a fraction of the cost, with the same hash values and the same tie rules,
so scores are unchanged.

Conventions: `bounds` int64 [n_docs + 1], document d's words are `bounds[d]:bounds[d + 1]` of
the flat arrays (`doc_bounds`); hashes are the uint64 word hashes of `tokens.Tokens`
(`utf8_scan.words`). numba checks only this file's timestamp for its cache, so the compiled
helpers live here beside their callers; only constants come from other files.
"""

from __future__ import annotations

import numpy as np

from dataloaders.lazy_jit import kernel
from forensics.score.utf8_scan import FNV_PRIME

# The n-gram hash mixing constants: the hash of the n-gram of words w_0..w_{n-1} is
# h = 0; h = (h ^ (w_j * MIX[j % 10])) * FNV_PRIME + (j + 1) for j = 0..n-1.
MIX = np.array(
    [0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93,
     0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53, 0x94D049BB133111EB, 0xBF58476D1CE4E5B9,
     0x2545F4914F6CDD1D, 0x9FB21C651E98DF25],
    dtype=np.uint64,
)  # fmt: skip
_FIB = np.uint64(0x9E3779B97F4A7C15)


def doc_bounds(doc: np.ndarray, n_docs: int) -> np.ndarray:
    """int64 [n_docs + 1]: where each document's run starts in the non-decreasing `doc` array."""
    return np.searchsorted(doc, np.arange(n_docs + 1)).astype(np.int64)


# ---------------------------------------------------------------- one table per document


@kernel(cache=True, inline="always")
def _table_bits(n: int) -> int:
    """log2 of a power-of-two table size holding `n` keys at most half full."""
    bits = 4
    while (1 << bits) < 2 * n:
        bits += 1
    return bits


@kernel(cache=True, nogil=True)
def _longest(bounds):
    """Words in the longest document (16 at least): what the per-document buffers must hold."""
    return max(16, np.max(np.diff(bounds))) if len(bounds) > 1 else 16


@kernel(cache=True, nogil=True)
def _tables(longest):
    """(keys uint64, used int64: the count, 0 marks a free slot, first int64: the index of the
    key's first insertion): one open-addressing table big enough for the longest document,
    reused by every document (cleared to its own size first)."""
    size = 1 << _table_bits(longest)
    keys = np.empty(size, dtype=np.uint64)
    return keys, np.zeros(size, dtype=np.int64), np.empty(size, dtype=np.int64)


@kernel(cache=True, inline="always")
def _slot(keys, used, key, bits):
    """Index of `key` in an open-addressing table (linear probing); `used[i]` 0 marks a free one."""
    mask = (1 << bits) - 1
    i = np.int64((key * _FIB) >> np.uint64(64 - bits))
    while used[i] != 0 and keys[i] != key:
        i = (i + 1) & mask
    return i


@kernel(cache=True, inline="always")
def _add(keys, used, first, key, i, bits):
    """Count one occurrence of `key` (at index `i`, kept in `first` when it is the first)."""
    s = _slot(keys, used, key, bits)
    if used[s] == 0:
        keys[s] = key
        first[s] = i
    used[s] += 1


# ---------------------------------------------------------------- the counts


@kernel(cache=True, nogil=True)
def slot_words(bounds, h, content, min_count, min_share):
    """bool [n_words]: content words whose form is >= `min_count` and >= `min_share` of the
    words of their document (every occurrence counted, content or not): the page's slot filler."""
    out = np.zeros(len(h), dtype=np.bool_)
    keys, used, first = _tables(_longest(bounds))
    for d in range(len(bounds) - 1):
        a, b = bounds[d], bounds[d + 1]
        m = b - a
        if m == 0:
            continue
        bits = _table_bits(m)
        used[: 1 << bits] = 0
        for i in range(a, b):
            _add(keys, used, first, h[i], i, bits)
        for i in range(a, b):
            if content[i]:
                c = used[_slot(keys, used, h[i], bits)]
                out[i] = c >= min_count and c >= min_share * m
    return out


@kernel(cache=True, nogil=True)
def _count_ngrams(h, a, n, k, cur, rep, keys, used, first, bits):
    """Extend `cur` (the (n-1)-gram hashes at starts 0..k of a document beginning at flat
    index `a`) to n-grams and count those whose prefix repeats (`rep`) in the table; then
    `rep[i]` says whether the n-gram at i occurs twice or more. Returns whether any does."""
    used[: 1 << bits] = 0
    for i in range(k):
        cur[i] = (cur[i] ^ (h[a + i + n - 1] * MIX[(n - 1) % 10])) * FNV_PRIME + np.uint64(n)
        if rep[i]:
            _add(keys, used, first, cur[i], i, bits)
    any_rep = False
    for i in range(k):
        if rep[i]:
            rep[i] = used[_slot(keys, used, cur[i], bits)] >= 2
            any_rep = any_rep or rep[i]
    rep[k:] = False
    return any_rep


@kernel(cache=True, nogil=True)
def _top_chars(used, first, size, length, a, n):
    """Largest count x characters (of its first occurrence) over n-grams counted twice or more."""
    best = 0.0
    for s in range(size):
        if used[s] >= 2:
            f = a + first[s]
            chars = 0
            for j in range(n):
                chars += length[f + j]
            best = max(best, used[s] * chars)
    return best


@kernel(cache=True, nogil=True)
def _covered(rep, k, n, m, mark):
    """Words of an m-word document inside some n-gram flagged in `rep` (starts 0..k)."""
    mark[: m + 1] = 0
    for i in range(k):
        if rep[i]:
            mark[i] += 1
            mark[i + n] -= 1
    run = 0
    inside = 0
    for i in range(m):
        run += mark[i]
        if run > 0:
            inside += 1
    return inside


@kernel(cache=True, nogil=True)
def ngram_stats(bounds, h, length, max_n):
    """Per document: top n-gram coverage for n = 2, 3, 4 and words inside repeated max_n-grams.

    Returns (top [n_docs, 3] float64: the largest count x characters of an n-gram occurring at
    least twice, n = 2, 3, 4; covered [n_docs] float64: words inside some max_n-gram occurring
    at least twice). An n-gram's characters are those of its first occurrence. Only starts whose
    (n-1)-gram repeats are looked at for n (an n-gram can repeat only if its prefix does).
    N-gram hashes are MIX's.
    """
    n_docs = len(bounds) - 1
    top = np.zeros((n_docs, 3))
    covered = np.zeros(n_docs)
    longest = _longest(bounds)
    keys, used, first = _tables(longest)
    cur = np.empty(longest, dtype=np.uint64)
    rep = np.empty(longest, dtype=np.bool_)
    mark = np.empty(longest + 1, dtype=np.int64)
    for d in range(n_docs):
        a, b = bounds[d], bounds[d + 1]
        m = b - a
        if m < 2:
            continue
        bits = _table_bits(m)
        for i in range(m):
            cur[i] = (h[a + i] * MIX[0]) * FNV_PRIME + np.uint64(1)
            rep[i] = True
        for n in range(2, max_n + 1):
            k = m - n + 1  # n-gram starts in this document
            if k <= 0:
                break
            any_rep = _count_ngrams(h, a, n, k, cur, rep, keys, used, first, bits)
            if n <= 4:
                top[d, n - 2] = _top_chars(used, first, 1 << bits, length, a, n)
            if n == max_n:
                covered[d] = _covered(rep, k, n, m, mark)
            if not any_rep:
                break
    return top, covered


@kernel(cache=True, nogil=True)
def _median_gap(h, a, b, word, gaps):
    """Median distance in words between consecutive occurrences of `word` in h[a:b] (inf with
    fewer than two); `gaps` is scratch space of at least b - a entries."""
    ng = 0
    last = -1
    for i in range(a, b):
        if h[i] == word:
            if last >= 0:
                gaps[ng] = i - last
                ng += 1
            last = i
    return np.median(gaps[:ng]) if ng > 0 else np.inf


@kernel(cache=True, nogil=True)
def top_keyword(bounds, h, content):
    """Per document: its most frequent repeated content word and how regularly it recurs.

    Returns (count [n_docs] int64: occurrences of that word as a content word, 0 when no
    content word repeats; index [n_docs] int64: its first content occurrence in the flat arrays,
    -1 when none; gap [n_docs] float64: median distance in words between consecutive
    occurrences of the same form, inf with fewer than two). Ties in count go to the word seen
    first.
    """
    n_docs = len(bounds) - 1
    count = np.zeros(n_docs, dtype=np.int64)
    index = np.full(n_docs, -1, dtype=np.int64)
    gap = np.full(n_docs, np.inf)
    longest = _longest(bounds)
    keys, used, first = _tables(longest)
    gaps = np.empty(longest, dtype=np.float64)
    for d in range(n_docs):
        a, b = bounds[d], bounds[d + 1]
        if b - a < 2:
            continue
        bits = _table_bits(b - a)
        used[: 1 << bits] = 0
        for i in range(a, b):
            if content[i]:
                _add(keys, used, first, h[i], i, bits)
        best_c = 1
        best_i = -1
        for s in range(1 << bits):
            c = used[s]
            if c > best_c or (c == best_c and c >= 2 and first[s] < best_i):
                best_c = c
                best_i = first[s]
        if best_i < 0:
            continue
        count[d] = best_c
        index[d] = best_i
        gap[d] = _median_gap(h, a, b, h[best_i], gaps)
    return count, index, gap


@kernel(cache=True, inline="always")
def _all_masked(masked, i, shingle):
    """Whether every word of the shingle starting at i is masked."""
    n_masked = 0
    for j in range(shingle):
        n_masked += masked[i + j]
    return n_masked == shingle


@kernel(cache=True, nogil=True)
def minhash(bounds, h, masked, eligible_in, shingle, bins, min_shingles, empty):
    """One-permutation MinHash of each document's word `shingle`-grams (`skeleton.signatures`).

    Shingles made only of masked words are skipped; documents with fewer than `min_shingles`
    kept shingles (or not in `eligible_in`) stay empty. Returns (sig uint64 [n_docs, bins]: the
    minimum of hash // bins per bin hash % bins, `empty` where none; kept int64 [n_docs]: the
    document's kept shingles, 0 outside `eligible_in`).
    """
    n_docs = len(bounds) - 1
    sig = np.full((n_docs, bins), empty, dtype=np.uint64)
    counts = np.zeros(n_docs, dtype=np.int64)
    nb = np.uint64(bins)
    for d in range(n_docs):
        if not eligible_in[d]:
            continue
        a, b = bounds[d], bounds[d + 1]
        kept = 0
        for i in range(a, b - shingle + 1):
            if not _all_masked(masked, i, shingle):
                kept += 1
        counts[d] = kept
        if kept < min_shingles:
            continue
        for i in range(a, b - shingle + 1):
            if _all_masked(masked, i, shingle):
                continue
            out = np.uint64(0)
            for j in range(shingle):
                out = (out ^ (h[i + j] * MIX[j])) * FNV_PRIME + np.uint64(j + 1)
            col = np.int64(out % nb)
            v = out // nb
            if v < sig[d, col]:
                sig[d, col] = v
    return sig, counts


@kernel(cache=True, nogil=True)
def pair_jaccard(sig, a, b, empty):
    """Estimated Jaccard of each pair of rows (a[i], b[i]) of the MinHash signatures `sig`
    (uint64 [n, bins]): the bins equal among the bins filled in either row (`empty`: a bin
    with no shingle), 0 where neither has any. `skeleton._jaccard`, without gathering both
    rows of every pair (a template farm links millions of pairs)."""
    out = np.empty(len(a), dtype=np.float64)
    for i in range(len(a)):
        x, y = a[i], b[i]
        equal = 0
        filled = 0
        for j in range(sig.shape[1]):
            u, v = sig[x, j], sig[y, j]
            if u != empty or v != empty:
                filled += 1
                if u == v:
                    equal += 1
        out[i] = equal / max(filled, 1)
    return out
