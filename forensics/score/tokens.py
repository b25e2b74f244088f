"""Word tokens of a whole column as flat arrays, shared by the spam signals and the skeleton index.

Why flat arrays: n-gram statistics and shingle hashes over tens of thousands of documents are
cheap as numpy operations on one long array of word hashes with a parallel array of document ids,
and expensive as per-document Python lists.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import polars as pl

from forensics.score.doc_counts import doc_bounds, slot_words
from forensics.score.utf8_scan import content_words, word_hashes, words

WORD = r"\w+"
STOPWORDS = frozenset(
    "the a an and or of to in on for with by at from as is are was were be been it its this that "
    "these those you your we our they their he she his her not no but if then than so can will "
    "do does did has have had i me my all any more most other some such only own same too very "
    "just also into over under about after before between out up down off again further once "
    "here there when where why how what which who whom each few both nor s t don should now "
    # URL pieces are not keywords.
    "http https www com org net io html htm php github".split()
)


@dataclass(frozen=True)
class Tokens:
    """All words of all documents, in document order then text order.

    `doc`: int64 [n_words], the row each word belongs to (non-decreasing).
    `hash`: uint64 [n_words], hash of the lowercased word.
    `skel`: uint64 [n_words], hash of the word's skeleton form: one mask value for a
        capitalised word (names, brands, places: the usual template slots), another for a word
        with a digit, a third for a slot word (below), else the lowercased word's hash.
    `length`: int64 [n_words], characters in the word.
    `masked`: bool [n_words], True where the skeleton form is a mask ("X", "0" or a slot).
    `content`: bool [n_words], a lowercase content word: >= 3 letters, not a stopword, not masked.
    `n_docs`: number of rows in the column.
    `bounds`: int64 [n_docs + 1], document d's words are `bounds[d]:bounds[d + 1]` of the arrays.
    """

    doc: np.ndarray
    hash: np.ndarray
    skel: np.ndarray
    length: np.ndarray
    masked: np.ndarray
    n_docs: int
    content: np.ndarray | None = None
    bounds: np.ndarray | None = None


# Skeleton hashes of the two masks (any fixed values distinct from real word hashes will do).
_MASK_DIGIT = np.uint64(0x30D1A0C6E1F2A3B5)
_MASK_CAP = np.uint64(0x58C4F1E2D3B4A596)
_MASK_SLOT = np.uint64(0x7A3C5E1F2B4D6F81)
# A lowercase content word that makes up at least this share of its page's words (and occurs
# at least SLOT_MIN_COUNT times) is that page's slot filler: farms paste the product or service
# ("running shoes", "plumber") into every sentence, so it is the page's most repeated word,
# where prose names its topic at a few percent at most. Masking it lets pages of one farm that
# differ in their lowercase slot share a skeleton; pages of one text (mirrors, licence copies)
# mask the same words, so their raw-word similarity still tells them apart.
SLOT_SHARE = 0.03
SLOT_MIN_COUNT = 4


@functools.cache
def _stopword_hashes() -> np.ndarray:
    return np.sort(word_hashes(sorted(STOPWORDS)))


def tokenize(texts: pl.Series) -> Tokens:
    """Split every text into `\\w+` words (Unicode-aware, as polars' regex) and hash them.

    A word is "capitalised" when it differs from its lowercase form (Austin, NASA, iPhone) and
    a "number" when it holds an ASCII digit; both are skeleton masks. One compiled pass over the
    UTF-8 bytes (`utf8_scan.words`).
    """
    doc, h, length, cap, digit = words(texts.cast(pl.Utf8))
    content = content_words(h, length, digit | cap, _stopword_hashes())
    bounds = doc_bounds(doc, len(texts))
    # Slot words: counted per document in one compiled pass.
    slot = slot_words(bounds, h, content, SLOT_MIN_COUNT, SLOT_SHARE)
    masked = digit | cap | slot
    skel = np.where(digit, _MASK_DIGIT, np.where(slot, _MASK_SLOT, np.where(masked, _MASK_CAP, h)))
    return Tokens(
        doc=doc,
        hash=h,
        skel=skel,
        length=length,
        masked=masked,
        n_docs=len(texts),
        content=content,
        bounds=bounds,
    )
