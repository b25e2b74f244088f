"""Compiled passes over a text column's UTF-8 bytes: character classes and words (numba, cached).

Why: counting whitespace, checking which kinds of character a page holds and splitting pages
into words are, as polars regex passes, one match object per character or one string per word.
Read straight from the column's Arrow buffers, each is one loop over the bytes that releases
the GIL. Three jobs share the loop:

- `char_groups`: which kinds of character a page holds, so that each garbage regex runs only on
  the pages it can match (garbage.py);
- `visible_and_ascii_class`: visible characters and code symbols per page (spam.py);
- `words`: the tokeniser, every `\\w+` word hashed as polars would lowercase it (tokens.py).

Arrow strings are valid UTF-8 (polars checks on the way in), so a lead byte says the length of
its character and `_decode` needs no bounds checks. numba caches each file's compiled functions
and checks only that file's timestamp, so every compiled helper stays in the file of its callers.
"""

from __future__ import annotations

import functools

import numpy as np
import polars as pl

from dataloaders.lazy_jit import kernel

# The FNV-1a prime: the word hash's per-code-point step, and the n-gram hashes' (doc_counts).
FNV_PRIME = np.uint64(0x100000001B3)


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


@kernel(cache=True, inline="always")
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


# ---------------------------------------------------------------- characters


@kernel(cache=True, inline="always")
def _is_space(cp):
    """Unicode whitespace, as the regex `\\s` has it."""
    return (
        cp == 32 or 9 <= cp <= 13 or cp == 0x85 or cp == 0xA0 or cp == 0x1680
        or 0x2000 <= cp <= 0x200A or cp == 0x2028 or cp == 0x2029 or cp == 0x202F
        or cp == 0x205F or cp == 0x3000
    )  # fmt: skip


@kernel(cache=True, nogil=True)
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
            cp, step = _decode(data, i)
            if _is_space(cp):
                space += 1
            elif cp < 0x80 and marked[cp]:
                mark += 1
            i += step
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


@kernel(cache=True, inline="always")
def _char_group(cp):
    """The `HAS_*` bit of one code point (0: none)."""
    if cp < 0x20 and cp != 9 and cp != 10 and cp != 13 or 0x7F <= cp <= 0x9F:
        return HAS_CONTROL
    if 0xC2 <= cp <= 0xF4:
        return HAS_LATIN1_LEAD
    if cp == 0xFFFD:
        return HAS_FFFD
    if (
        0x1100 <= cp <= 0x11FF or 0x2E80 <= cp <= 0xD7FF or 0xF900 <= cp <= 0xFAFF
        or 0xFF00 <= cp <= 0xFFEF or cp >= 0x10000
    ):  # fmt: skip
        return HAS_EAST_ASIAN
    return 0


@kernel(cache=True, nogil=True)
def _char_groups(offsets, data):
    n = len(offsets) - 1
    out = np.zeros(n, dtype=np.uint8)
    for d in range(n):
        bits = 0
        i = offsets[d]
        end = offsets[d + 1]
        while i < end:
            cp, step = _decode(data, i)
            bits |= _char_group(cp)
            i += step
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


@kernel(cache=True, inline="always")
def _mix(h, cp):
    return (h ^ np.uint64(cp)) * FNV_PRIME


@kernel(cache=True, inline="always")
def _finish(h):
    """splitmix64's finaliser: every bit of the word hash depends on every code point."""
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


@kernel(cache=True, nogil=True)
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


@kernel(cache=True, nogil=True)
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


@kernel(cache=True, nogil=True)
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
