"""Mixed-script words: a CJK or half-width kana character glued inside a Latin word.

Why: UTF-8 read as GBK, Big5, Shift-JIS or EUC-KR in one short span (one name in an otherwise
Latin page) turns `António` into `Ant贸nio` (GBK), `Antﾃｳnio` (Shift-JIS) or `Ant처nio` (EUC-KR).
`legacy_codecs` judges whole blocks of text and needs several recovered characters, so a single
broken word slips through it (measured: 38%). Real text also glues Latin to CJK
(`ls命令`, `PATHを設定`, `chmod和chown`), so a glued word alone proves nothing: the word is
counted only when re-encoding it with the suspected codec gives valid UTF-8 that is Latin text
with an accent or typographic punctuation and no CJK left, i.e. when the mistake can be undone.
For a genuine `ls和cat` that essentially never happens (和 is 0xBA 0xCD in GBK: not UTF-8).

Polars finds the candidate documents (a Latin letter next to a CJK or half-width kana
character); Python checks the glued words of those documents only, a few per document.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl

# A Latin letter (ASCII, Latin-1, Latin Extended-A/B) next to Han, Hangul or half-width katakana:
# what a legacy East Asian decoder makes of an accented Latin letter's two UTF-8 bytes.
_LATIN = "A-Za-z\u00c0-\u024f"
_CJK_RS = r"\p{Han}\p{Hangul}\uFF61-\uFF9F"
CANDIDATE_RS = f"[{_LATIN}][{_CJK_RS}]|[{_CJK_RS}][{_LATIN}]"
_CJK_PY = (
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\u1100-\u11ff\u3130-\u318f\uff61-\uff9f"
)
_WORD = re.compile(f"[{_LATIN}{_CJK_PY}]+")
# A whole run of Latin and CJK letters holding at least one Latin-CJK transition: what `_WORD`
# finds and `find` keeps, as one Rust regex (leftmost-first, so each match is a whole run).
MIXED_WORD_RS = (
    f"[{_LATIN}{_CJK_PY}]*(?:[{_LATIN}][{_CJK_PY}]|[{_CJK_PY}][{_LATIN}])[{_LATIN}{_CJK_PY}]*"
)
_HAS_CJK = re.compile(f"[{_CJK_PY}]")
_HAS_LATIN = re.compile(f"[{_LATIN}]")
# What accented Latin text decodes to: letters with diacritics and the punctuation that
# word processors insert (curly quotes, dashes, ellipsis, no-break space, euro, trade mark).
# Every non-ASCII character of the re-encoded word must be one of these, and one that sits
# beside letters in text must be there: a letter with a diacritic, a quote, a dash, ©, ®, °, ™.
# Currency signs, fractions, ordinals and spacing accents sit beside digits or nowhere, so a
# word giving back only those is Han glued to Latin by chance (`楼E` in GBK is `¥E`).
_RECOVERED_CHARS = "\u00a0-\u017f\u2010-\u2027\u20ac\u2122"
_BESIDE_LETTERS = (
    "\u00a1\u00a9\u00ab\u00ae\u00b0\u00b7\u00bb\u00bf-\u00d6\u00d8-\u00f6\u00f8-\u017f"
    "\u2010-\u2027\u20ac\u2122"
)
_RECOVERED_OK = re.compile(f"[{_BESIDE_LETTERS}]")
_RECOVERED_ONLY = re.compile(f"[\x00-\x7f{_RECOVERED_CHARS}]+")
CODECS = ("gbk", "big5", "shift_jis", "euc_kr")
CODEC_NAMES = {"gbk": "GBK", "big5": "Big5", "shift_jis": "Shift-JIS", "euc_kr": "EUC-KR"}


@dataclass(frozen=True)
class MixedWord:
    """One glued word that re-encodes to Latin text: `word` as found, `fixed` as it was."""

    word: str
    fixed: str
    codec: str


class MixedScriptWords:
    """Rule `mixed_script`: Latin words with a legacy-decoded CJK span inside them.

    `find(text)` returns the verified words; a document with one is flagged (one is enough:
    the re-encoding check is what makes it evidence, not the count).
    """

    key = "mixed_script"
    pattern = CANDIDATE_RS

    @staticmethod
    def undo(word: str) -> MixedWord | None:
        """The word re-encoded with the first codec that turns it back into Latin text."""
        for codec in CODECS:
            try:
                fixed = word.encode(codec).decode("utf-8")
            except (UnicodeEncodeError, UnicodeDecodeError):
                continue
            if fixed != word and _RECOVERED_ONLY.fullmatch(fixed) and _RECOVERED_OK.search(fixed):
                return MixedWord(word, fixed, codec)
        return None

    def find(self, text: str) -> list[MixedWord]:
        out = []
        for m in _WORD.finditer(text):
            w = m.group(0)
            if _HAS_CJK.search(w) and _HAS_LATIN.search(w):
                hit = self.undo(w)
                if hit is not None:
                    out.append(hit)
        return out

    def find_all(self, texts: pl.Series) -> list[list[MixedWord]]:
        """`find` for every text of a column: the glued words are cut out natively (polars),
        so Python sees only those few words, not every word of a CJK page."""
        out = []
        for words in texts.str.extract_all(MIXED_WORD_RS).to_list():
            hits = [self.undo(w) for w in words or ()]
            out.append([h for h in hits if h is not None])
        return out

    @staticmethod
    def reason(words: list[MixedWord]) -> str:
        first = words[0]
        return (
            f"UTF-8 decoded as {CODEC_NAMES[first.codec]} inside Latin words: {len(words)} "
            f"like '{first.word[:24]}' (re-encoded: '{first.fixed[:24]}')"
        )
