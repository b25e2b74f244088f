"""Compiled per-document loops over the flat token arrays (numba, cached on disk).

Why: the word statistics ask "how often does this word / n-gram occur *in its own document*"
about every token. As whole-column polars group-bys that is one hash table over tens of
millions of salted hashes per question (five n-gram sizes, content words, slot words, MinHash
bins): 60% of the scoring CPU time. Documents are contiguous runs of the flat arrays, so a loop
that keeps one small open-addressing table per document (a few hundred entries, in cache) answers
the same questions at a fraction of the cost, with the same hash values and the same tie rules,
so scores are unchanged.

Conventions: `bounds` int64 [n_docs + 1], document d's tokens are `bounds[d]:bounds[d + 1]` of
the flat arrays (`doc_bounds`); hashes are the uint64 word hashes of `tokens.Tokens`.
"""

from __future__ import annotations

import functools

import numpy as np
import polars as pl
from numba import njit

# The n-gram hash mixing constants of `tokens.ngram_hashes` (same values, same order).
MIX = np.array(
    [0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93,
     0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53, 0x94D049BB133111EB, 0xBF58476D1CE4E5B9,
     0x2545F4914F6CDD1D, 0x9FB21C651E98DF25],
    dtype=np.uint64,
)  # fmt: skip
FNV_PRIME = np.uint64(0x100000001B3)
_FIB = np.uint64(0x9E3779B97F4A7C15)


def doc_bounds(doc: np.ndarray, n_docs: int) -> np.ndarray:
    """int64 [n_docs + 1]: where each document's run starts in the non-decreasing `doc` array."""
    return np.searchsorted(doc, np.arange(n_docs + 1)).astype(np.int64)


@njit(cache=True, inline="always")
def _table_bits(n: int) -> int:
    """log2 of a power-of-two table size holding `n` keys at most half full."""
    bits = 4
    while (1 << bits) < 2 * n:
        bits += 1
    return bits


@njit(cache=True, inline="always")
def _slot(keys, used, key, bits):
    """Index of `key` in an open-addressing table (linear probing); `used[i]` 0 marks a free one."""
    mask = (1 << bits) - 1
    i = np.int64((key * _FIB) >> np.uint64(64 - bits))
    while used[i] != 0 and keys[i] != key:
        i = (i + 1) & mask
    return i


@njit(cache=True)
def slot_words(bounds, h, content, min_count, min_share):
    """bool [n_words]: content words whose form is >= `min_count` and >= `min_share` of the
    words of their document (every occurrence counted, content or not): the page's slot filler."""
    out = np.zeros(len(h), dtype=np.bool_)
    cap = 16
    keys = np.empty(cap, dtype=np.uint64)
    used = np.zeros(cap, dtype=np.int64)  # occurrence count; 0: free
    for d in range(len(bounds) - 1):
        a, b = bounds[d], bounds[d + 1]
        m = b - a
        if m == 0:
            continue
        bits = _table_bits(m)
        size = 1 << bits
        if size > cap:
            cap = size
            keys = np.empty(cap, dtype=np.uint64)
            used = np.zeros(cap, dtype=np.int64)
        used[:size] = 0
        for i in range(a, b):
            s = _slot(keys, used, h[i], bits)
            keys[s] = h[i]
            used[s] += 1
        for i in range(a, b):
            if content[i]:
                c = used[_slot(keys, used, h[i], bits)]
                out[i] = c >= min_count and c >= min_share * m
    return out


@njit(cache=True)
def _count_ngrams(h, a, n, k, cur, rep, keys, used, first, bits):
    """Extend `cur` (the (n-1)-gram hashes at starts 0..k of a document beginning at flat
    index `a`) to n-grams and count those whose prefix repeats (`rep`) in the table; then
    `rep[i]` says whether the n-gram at i occurs twice or more. Returns whether any does."""
    used[: 1 << bits] = 0
    for i in range(k):
        cur[i] = (cur[i] ^ (h[a + i + n - 1] * MIX[(n - 1) % 10])) * FNV_PRIME + np.uint64(n)
        if rep[i]:
            s = _slot(keys, used, cur[i], bits)
            if used[s] == 0:
                keys[s] = cur[i]
                first[s] = i
            used[s] += 1
    any_rep = False
    for i in range(k):
        if rep[i]:
            rep[i] = used[_slot(keys, used, cur[i], bits)] >= 2
            any_rep = any_rep or rep[i]
    rep[k:] = False
    return any_rep


@njit(cache=True)
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


@njit(cache=True)
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


@njit(cache=True)
def ngram_stats(bounds, h, length, max_n):
    """Per document: top n-gram coverage for n = 2, 3, 4 and words inside repeated max_n-grams.

    Returns (top [n_docs, 3] float64: the largest count x characters of an n-gram occurring at
    least twice, n = 2, 3, 4; covered [n_docs] float64: words inside some max_n-gram occurring
    at least twice). An n-gram's characters are those of its first occurrence. Only starts whose
    (n-1)-gram repeats are looked at for n (an n-gram can repeat only if its prefix does).
    N-gram hashes are `tokens.ngram_hashes`'s.
    """
    n_docs = len(bounds) - 1
    top = np.zeros((n_docs, 3))
    covered = np.zeros(n_docs)
    longest = max(16, np.max(np.diff(bounds))) if n_docs else 16
    bits_max = _table_bits(longest)
    keys = np.empty(1 << bits_max, dtype=np.uint64)
    used = np.zeros(1 << bits_max, dtype=np.int64)
    first = np.empty(1 << bits_max, dtype=np.int64)
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


@njit(cache=True)
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
    cap = 16
    keys = np.empty(cap, dtype=np.uint64)
    used = np.zeros(cap, dtype=np.int64)
    first = np.empty(cap, dtype=np.int64)
    gaps = np.empty(16, dtype=np.float64)
    for d in range(n_docs):
        a, b = bounds[d], bounds[d + 1]
        m = b - a
        if m < 2:
            continue
        bits = _table_bits(m)
        size = 1 << bits
        if size > cap:
            cap = size
            keys = np.empty(cap, dtype=np.uint64)
            used = np.zeros(cap, dtype=np.int64)
            first = np.empty(cap, dtype=np.int64)
        used[:size] = 0
        for i in range(a, b):
            if content[i]:
                s = _slot(keys, used, h[i], bits)
                if used[s] == 0:
                    keys[s] = h[i]
                    first[s] = i
                used[s] += 1
        best_c = 1
        best_i = -1
        for s in range(size):
            c = used[s]
            if c > best_c or (c == best_c and c >= 2 and first[s] < best_i):
                best_c = c
                best_i = first[s]
        if best_i < 0:
            continue
        count[d] = best_c
        index[d] = best_i
        word = h[best_i]
        if m > len(gaps):
            gaps = np.empty(m, dtype=np.float64)
        ng = 0
        last = -1
        for i in range(a, b):
            if h[i] == word:
                if last >= 0:
                    gaps[ng] = i - last
                    ng += 1
                last = i
        if ng > 0:
            gap[d] = np.median(gaps[:ng])
    return count, index, gap


@njit(cache=True)
def minhash(bounds, h, masked, eligible_in, shingle, bins, min_shingles, empty):
    """One-permutation MinHash of each document's word `shingle`-grams (`skeleton.signatures`).

    Shingles made only of masked words are skipped; documents with fewer than `min_shingles`
    kept shingles (or not in `eligible_in`) stay empty. Returns (sig uint64 [n_docs, bins]: the
    minimum of hash // bins per bin hash % bins, `empty` where none; eligible bool [n_docs]).
    """
    n_docs = len(bounds) - 1
    sig = np.full((n_docs, bins), empty, dtype=np.uint64)
    eligible = np.zeros(n_docs, dtype=np.bool_)
    nb = np.uint64(bins)
    for d in range(n_docs):
        if not eligible_in[d]:
            continue
        a, b = bounds[d], bounds[d + 1]
        kept = 0
        for i in range(a, b - shingle + 1):
            n_masked = 0
            for j in range(shingle):
                n_masked += masked[i + j]
            if n_masked < shingle:
                kept += 1
        if kept < min_shingles:
            continue
        eligible[d] = True
        for i in range(a, b - shingle + 1):
            n_masked = 0
            out = np.uint64(0)
            for j in range(shingle):
                n_masked += masked[i + j]
                out = (out ^ (h[i + j] * MIX[j])) * FNV_PRIME + np.uint64(j + 1)
            if n_masked < shingle:
                col = np.int64(out % nb)
                v = out // nb
                if v < sig[d, col]:
                    sig[d, col] = v
    return sig, eligible


def utf8_buffers(texts: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """(offsets int64 [n + 1], data uint8): the column's UTF-8 bytes, row i at offsets[i]:[i + 1].

    Null rows are empty. Read from the Arrow large-string layout, without a copy per row.
    """
    arr = texts.cast(pl.Utf8).to_arrow(compat_level=pl.CompatLevel.oldest())
    _, off_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(off_buf, dtype=np.int64)[arr.offset : arr.offset + len(arr) + 1]
    if data_buf is None:  # every row null or empty
        return offsets, np.zeros(0, np.uint8)
    data = np.frombuffer(data_buf, dtype=np.uint8)
    return offsets, data


@njit(cache=True)
def _visible_and_marked(offsets, data, marked):
    n = len(offsets) - 1
    visible = np.zeros(n, dtype=np.int64)
    hits = np.zeros(n, dtype=np.int64)
    for d in range(n):
        chars = 0
        space = 0
        mark = 0
        i = offsets[d]
        end = offsets[d + 1]
        while i < end:
            b = data[i]
            if b < 0x80:
                if b == 32 or 9 <= b <= 13:
                    space += 1
                elif marked[b]:
                    mark += 1
                i += 1
            elif b < 0xE0:  # 2 bytes: U+0085, U+00A0
                if b == 0xC2 and i + 1 < end and (data[i + 1] == 0x85 or data[i + 1] == 0xA0):
                    space += 1
                i += 2
            elif b < 0xF0:  # 3 bytes: U+1680, U+2000-200A, U+2028/9, U+202F, U+205F, U+3000
                if i + 2 < end:
                    c = ((b & 0x0F) << 12) | ((data[i + 1] & 0x3F) << 6) | (data[i + 2] & 0x3F)
                    if (
                        c == 0x1680 or 0x2000 <= c <= 0x200A or c == 0x2028 or c == 0x2029
                        or c == 0x202F or c == 0x205F or c == 0x3000
                    ):  # fmt: skip
                        space += 1
                i += 3
            else:
                i += 4
            chars += 1
        visible[d] = chars - space
        hits[d] = mark
    return visible, hits


def visible_and_ascii_class(texts: pl.Series, ascii_class: str) -> tuple[np.ndarray, np.ndarray]:
    """Per row: characters that are not Unicode whitespace (regex `\\s`), and characters in the
    ASCII-only regex class `ascii_class`. One compiled pass over the UTF-8 bytes: as two polars
    `count_matches` passes, every space was a regex match (0.8 CPU-s per 20,000 pages)."""
    import re

    table = np.array([re.fullmatch(ascii_class, chr(b)) is not None for b in range(128)])
    offsets, data = utf8_buffers(texts)
    return _visible_and_marked(offsets, data, table)


# Bits of `char_groups`: which kinds of character a document holds at all.
HAS_CONTROL = 1  # C0 controls other than tab, LF, CR; DEL; C1 controls (U+0080-U+009F)
HAS_LATIN1_LEAD = 2  # U+00C2-U+00F4: what a UTF-8 lead byte becomes when read as cp1252
HAS_FFFD = 4  # U+FFFD
HAS_EAST_ASIAN = 8  # U+1100-U+11FF, U+2E80-U+D7FF, U+F900-U+FAFF, U+FF00-U+FFEF, >= U+10000:
# a superset of Han, Hangul, Hiragana, Katakana and half-width forms


@njit(cache=True)
def _char_groups(offsets, data):
    n = len(offsets) - 1
    out = np.zeros(n, dtype=np.uint8)
    for d in range(n):
        bits = 0
        i = offsets[d]
        end = offsets[d + 1]
        while i < end:
            b = data[i]
            if b < 0x80:
                if b < 0x20 and b != 9 and b != 10 and b != 13 or b == 0x7F:
                    bits |= 1
                i += 1
                continue
            if b < 0xE0:
                c = ((b & 0x1F) << 6) | (data[i + 1] & 0x3F) if i + 1 < end else 0
                if c <= 0x9F:
                    bits |= 1
                elif 0xC2 <= c <= 0xF4:
                    bits |= 2
                i += 2
            elif b < 0xF0:
                c = 0
                if i + 2 < end:
                    c = ((b & 0x0F) << 12) | ((data[i + 1] & 0x3F) << 6) | (data[i + 2] & 0x3F)
                if c == 0xFFFD:
                    bits |= 4
                elif (
                    0x1100 <= c <= 0x11FF or 0x2E80 <= c <= 0xD7FF or 0xF900 <= c <= 0xFAFF
                    or 0xFF00 <= c <= 0xFFEF
                ):  # fmt: skip
                    bits |= 8
                i += 3
            else:
                bits |= 8
                i += 4
        out[d] = bits
    return out


def char_groups(texts: pl.Series) -> np.ndarray:
    """uint8 [n]: per row, the `HAS_*` bits of the characters it holds (null rows: 0).

    One compiled pass over the UTF-8 bytes, so that each garbage regex runs only on the
    documents that hold a character it needs (most pages have no control character, no
    U+FFFD and no CJK), instead of on every page with a curly quote.
    """
    return _char_groups(*utf8_buffers(texts))


# ---------------------------------------------------------------- words


@functools.cache
def char_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per code point: `word` bool (what the Rust regex `\\w` matches, asked of polars itself, so
    words end exactly where `str.extract_all(r"\\w+")` ends them), `lower` int32 (the lowercase
    code point as polars' `to_lowercase` gives it; -1 for U+0130, whose lowercase is two code
    points) and `cased` bool (has an upper or lower case form). Built once per process (~0.3 s).
    """
    cps = np.arange(0x110000)
    cps = cps[(cps < 0xD800) | (cps > 0xDFFF)]
    chars = pl.Series([chr(c) for c in cps.tolist()])
    word = np.zeros(0x110000, dtype=np.bool_)
    word[cps] = chars.str.contains(r"^\w$").to_numpy()
    lowered = chars.str.to_lowercase()
    uppered = chars.str.to_uppercase()
    single = (lowered.str.len_chars() == 1).to_numpy()
    lower = np.arange(0x110000, dtype=np.int32)
    lower[cps[single]] = [ord(c) for c in lowered.filter(pl.Series(single)).to_list()]
    lower[cps[~single]] = -1
    cased = np.zeros(0x110000, dtype=np.bool_)
    cased[cps] = ((lowered != chars) | (uppered != chars)).to_numpy()
    return word, lower, cased


@njit(cache=True, inline="always")
def _decode(data, i):
    """(code point, byte length) of the UTF-8 character starting at data[i] (valid UTF-8)."""
    b = np.int64(data[i])
    if b < 0x80:
        return b, 1
    if b < 0xE0:
        return ((b & 0x1F) << 6) | (data[i + 1] & 0x3F), 2
    if b < 0xF0:
        return ((b & 0x0F) << 12) | ((data[i + 1] & 0x3F) << 6) | (data[i + 2] & 0x3F), 3
    c = ((b & 0x07) << 18) | ((data[i + 1] & 0x3F) << 12) | ((data[i + 2] & 0x3F) << 6)
    return c | (data[i + 3] & 0x3F), 4


@njit(cache=True, inline="always")
def _mix(h, cp):
    return (h ^ np.uint64(cp)) * FNV_PRIME


@njit(cache=True, inline="always")
def _finish(h):
    """splitmix64's finaliser: every bit of the word hash depends on every code point."""
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


@njit(cache=True)
def _count_words(offsets, data, word):
    n = len(offsets) - 1
    counts = np.zeros(n, dtype=np.int64)
    for d in range(n):
        i, end, inside = offsets[d], offsets[d + 1], False
        while i < end:
            cp, step = _decode(data, i)
            if word[cp] and not inside:
                counts[d] += 1
            inside = word[cp]
            i += step
    return counts


@njit(cache=True)
def _words(offsets, data, word, lower, cased, counts):
    """Every `\\w+` word: hash of its lowercase form, code points, any cased change, any digit."""
    total = counts.sum()
    h_out = np.empty(total, dtype=np.uint64)
    length = np.empty(total, dtype=np.int64)
    cap = np.zeros(total, dtype=np.bool_)
    digit = np.zeros(total, dtype=np.bool_)
    k = -1
    for d in range(len(offsets) - 1):
        i, end, inside, prev_cased = offsets[d], offsets[d + 1], False, False
        h = np.uint64(0xCBF29CE484222325)
        while i < end:
            cp, step = _decode(data, i)
            if not word[cp]:
                if inside:
                    h_out[k] = _finish(h)
                inside = False
                i += step
                continue
            if not inside:
                k += 1
                inside, prev_cased, length[k] = True, False, 0
                h = np.uint64(0xCBF29CE484222325)
            length[k] += 1
            low = lower[cp]
            if low != cp:
                cap[k] = True
            if 48 <= cp <= 57:
                digit[k] = True
            if low == -1:  # U+0130: i + combining dot above
                h = _mix(_mix(h, 0x69), 0x307)
            elif cp == 0x3A3 and prev_cased:  # final sigma, as Rust's to_lowercase has it
                nxt = _decode(data, i + step)[0] if i + step < end else 0x20
                h = _mix(h, 0x3C2 if not cased[nxt] else 0x3C3)
            else:
                h = _mix(h, low)
            prev_cased = cased[cp]
            i += step
        if inside:
            h_out[k] = _finish(h)
    return h_out, length, cap, digit


def words(texts: pl.Series) -> tuple[np.ndarray, ...]:
    """The `\\w+` words of a column in one compiled pass over its UTF-8 bytes.

    Returns (doc int64, hash uint64 of the lowercase form, length int64 in code points, cap
    bool: differs from its lowercase form, digit bool: holds an ASCII digit), one entry per
    word in document then text order. As polars `extract_all` + `explode` + `to_lowercase` +
    `hash` this was a quarter of all scoring CPU time: every word became a string twice.
    """
    word, lower, cased = char_tables()
    offsets, data = utf8_buffers(texts)
    counts = _count_words(offsets, data, word)
    h, length, cap, digit = _words(offsets, data, word, lower, cased, counts)
    doc = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    return doc, h, length, cap, digit


def word_hashes(items: list[str]) -> np.ndarray:
    """uint64 hash of each single word, as `words` computes it (for stopword lists)."""
    _, h, _, _, _ = words(pl.Series(items, dtype=pl.Utf8))
    return h


@njit(cache=True)
def content_words(h, length, masked, stop):
    """bool [n_words]: >= 3 characters, not masked, hash not in the sorted array `stop`
    (a binary search per word: numpy's searchsorted over ten million words cost 0.7 s)."""
    out = np.zeros(len(h), dtype=np.bool_)
    for i in range(len(h)):
        if length[i] < 3 or masked[i]:
            continue
        lo, hi = 0, len(stop)
        while lo < hi:
            mid = (lo + hi) // 2
            if stop[mid] < h[i]:
                lo = mid + 1
            else:
                hi = mid
        out[i] = lo == len(stop) or stop[lo] != h[i]
    return out
