"""The compiled loops (`forensics.score.doc_counts`, `utf8_scan`) against plain Python references.

The kernels replaced polars group-bys and must give the same numbers: checked here on small
random documents with a vocabulary small enough that words and n-grams repeat, including empty
and one-word documents, and against polars' own `\\s` and the garbage regexes' character needs.
"""

from __future__ import annotations

import random
import statistics
from collections import Counter

import numpy as np
import polars as pl

from forensics.score import doc_counts as D
from forensics.score import utf8_scan as U
from forensics.score.doc_counts import MIX


def _docs(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rnd = random.Random(seed)
    sizes = [0, 1, 2, 7] + [rnd.randint(0, 60) for _ in range(40)]
    doc = np.repeat(np.arange(len(sizes)), sizes).astype(np.int64)
    vocab = np.array([rnd.getrandbits(64) for _ in range(9)], dtype=np.uint64)
    h = vocab[np.array([rnd.randrange(9) for _ in range(len(doc))], dtype=np.int64)]
    length = np.array([rnd.randint(1, 9) for _ in range(len(doc))], dtype=np.int64)
    content = np.array([rnd.random() < 0.7 for _ in range(len(doc))])
    return doc, h, length, content


def _ngram_hash(words: np.ndarray) -> int:
    out = np.uint64(0)
    with np.errstate(over="ignore"):
        for j, w in enumerate(words):
            out = (out ^ (w * MIX[j])) * np.uint64(0x100000001B3) + np.uint64(j + 1)
    return int(out)


def test_ngram_stats_match_a_per_document_count() -> None:
    doc, h, length, _ = _docs(1)
    bounds = D.doc_bounds(doc, int(doc.max()) + 1)
    top, covered = D.ngram_stats(bounds, h, length, 6)
    for d in range(len(bounds) - 1):
        a, b = bounds[d], bounds[d + 1]
        for j, n in enumerate((2, 3, 4)):
            grams = [tuple(h[i : i + n]) for i in range(a, b - n + 1)]
            counts = Counter(grams)
            best = 0
            for g, c in counts.items():
                if c >= 2:
                    i = a + grams.index(g)
                    best = max(best, c * int(length[i : i + n].sum()))
            assert top[d, j] == best
        grams6 = [tuple(h[i : i + 6]) for i in range(a, b - 5)]
        counts6 = Counter(grams6)
        inside = set()
        for k, g in enumerate(grams6):
            if counts6[g] >= 2:
                inside.update(range(k, k + 6))
        assert covered[d] == len(inside)


def test_top_keyword_counts_ties_and_gaps() -> None:
    doc, h, _, content = _docs(2)
    bounds = D.doc_bounds(doc, int(doc.max()) + 1)
    count, index, gap = D.top_keyword(bounds, h, content)
    for d in range(len(bounds) - 1):
        a, b = bounds[d], bounds[d + 1]
        seen = Counter(int(h[i]) for i in range(a, b) if content[i])
        repeated = [(c, -next(i for i in range(a, b) if content[i] and h[i] == w), w)
                    for w, c in seen.items() if c >= 2]  # fmt: skip
        if not repeated:
            assert count[d] == 0 and index[d] == -1 and np.isinf(gap[d])
            continue
        c, neg_first, w = max(repeated)
        assert (count[d], index[d]) == (c, -neg_first)
        pos = [i for i in range(a, b) if h[i] == w]
        assert gap[d] == statistics.median(np.diff(pos).tolist())


def test_slot_words_and_minhash_match_their_definitions() -> None:
    doc, h, _, content = _docs(3)
    n_docs = int(doc.max()) + 1
    bounds = D.doc_bounds(doc, n_docs)
    slot = D.slot_words(bounds, h, content, 4, 0.1)
    masked = np.array([i % 5 == 0 for i in range(len(h))])
    sig, kept = D.minhash(bounds, h, masked.astype(np.int64), np.ones(n_docs, bool),
                          3, 8, 5, np.iinfo(np.uint64).max)  # fmt: skip
    eligible = kept >= 5
    for d in range(n_docs):
        a, b = bounds[d], bounds[d + 1]
        counts = Counter(h[a:b].tolist())
        for i in range(a, b):
            expect = content[i] and counts[int(h[i])] >= 4 and counts[int(h[i])] >= 0.1 * (b - a)
            assert slot[i] == expect
        shingles = [
            _ngram_hash(h[i : i + 3]) for i in range(a, b - 2) if not masked[i : i + 3].all()
        ]
        assert kept[d] == len(shingles)
        if eligible[d]:
            want = np.full(8, np.iinfo(np.uint64).max, dtype=np.uint64)
            for s in shingles:
                want[s % 8] = min(want[s % 8], s // 8)
            assert (sig[d] == want).all()


NEEDS = {
    U.HAS_CONTROL: r"[\x00-\x08\x0B\x0C\x0E-\x1F\x7F\x80-\x9F]",
    U.HAS_LATIN1_LEAD: "[\u00c2-\u00f4]",
    U.HAS_FFFD: "\ufffd",
    U.HAS_EAST_ASIAN: r"[\p{Han}\p{Hangul}\p{Hiragana}\p{Katakana}\uFF61-\uFF9F]",
}


def test_byte_scans_agree_with_the_regexes() -> None:
    texts = pl.Series(
        [
            "plain (text) #1_x",
            None,
            "",
            "a\u3000b\u00a0c\u2029 d\t",
            "x\x85y\x01",
            "caf\u00e9 \u00c3\u00a9",
            "\ufffd",
            "漢字 ｱ 한국",
            "\U00020000",
        ]
    )
    visible, symbols = U.visible_and_ascii_class(texts.slice(1), r"[(){}_#]")
    want_visible = (texts.str.len_chars() - texts.str.count_matches(r"\s")).fill_null(0)
    assert visible.tolist() == want_visible.to_list()[1:]
    assert symbols.tolist() == texts.str.count_matches(r"[(){}_#]").fill_null(0).to_list()[1:]
    # Every code point outside the surrogates, one per row: each bit is a superset of what its
    # regexes need, so gating a regex by it never skips a page the regex would match.
    chars = pl.Series([chr(c) for c in range(0x30000) if not 0xD800 <= c <= 0xDFFF])
    bits = U.char_groups(chars)
    for bit, pattern in NEEDS.items():
        has = chars.str.contains(pattern).to_numpy()
        assert ((bits & bit) != 0)[has].all(), hex(bit)
    assert U.char_groups(texts)[0] == 0


def test_words_end_where_polars_ends_them_and_hash_its_lowercase() -> None:
    """`utf8_scan.words` against `str.extract_all(r"\\w+")` + `to_lowercase`: the same words, the
    same lengths, and equal hashes exactly for equal lowercase forms (final sigma, dotted I,
    titlecase digraphs, combining marks, CJK, digits, emoji between words)."""
    texts = pl.Series(
        [
            "ΟΔΟΣ οδος ΑΣ1 Σ İstanbul i̇stanbul ǅemal ǆemal",
            "naïve NAÏVE e\u0301te\u0301 漢字かな 한국어 ｱｲｳ x2 X2 _id__ 😀word😀",
            "",
            None,
            "Don't stop: the THE The tHe, café CAFÉ",
        ]
    )
    doc, h, length, cap, digit = U.words(texts)
    ref = (
        pl.DataFrame({"text": texts})
        .with_row_index("doc")
        .select("doc", w=pl.col("text").str.extract_all(r"\w+"))
        .explode("w")
        .drop_nulls("w")
        .with_columns(lower=pl.col("w").str.to_lowercase())
    )
    assert doc.tolist() == ref["doc"].to_list()
    assert length.tolist() == ref["w"].str.len_chars().to_list()
    assert cap.tolist() == (ref["w"] != ref["lower"]).to_list()
    assert digit.tolist() == ref["w"].str.contains("[0-9]").to_list()
    pairs = pl.DataFrame({"ours": h, "lower": ref["lower"]}).unique()
    assert pairs["ours"].n_unique() == pairs["lower"].n_unique() == pairs.height
