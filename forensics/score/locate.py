"""Where a page's encoding damage is: character spans for the report's highlighting.

The garbage score says *that* a page is damaged; a reviewer opening a 10,000-character manual
page with one broken sentence needs to see *which* sentence. Three kinds of damage are located
here, each by what only damage produces:

- control characters other than tab, line feed, carriage return and form feed (C0, DEL, C1):
  clean text holds none of them (a form feed is a page break in man pages and GNU sources, so it
  is never marked);
- UTF-8 read as GBK, Shift-JIS, Big5 or EUC-KR: a run of non-ASCII characters is marked when
  re-encoding it with the codec gives back valid UTF-8 for all its high bytes, decoding to one
  writing system (`legacy_codecs`' test, applied run by run: a run of genuine Chinese or
  Japanese text re-encodes to valid UTF-8 only by chance, and a run of several characters
  essentially never; short runs count only on pages whose East Asian runs mostly recover).
  Neighbouring marked runs on a line join, so the span covers the sentence;
- mojibake from cp1252 / latin-1 and U+FFFD / private-use characters are the patterns
  `forensics.report.drilldown.span_patterns` already marks.
"""

from __future__ import annotations

import re

import numpy as np
import polars as pl

from forensics.score.legacy_codecs import _EAST_ASIAN, _RUN, CODECS, _one_script
from forensics.score.reencode import reencode

CONTROL_RUN = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f\x80-\x9f]+")
# Marked runs closer than this (ASCII between them: spaces, words, punctuation) join into one.
JOIN_GAP = 40
# A legacy-codec run must give back at least this many UTF-8 bytes: one accented letter is two,
# and one Han character re-encoding to one 2-byte letter is the commonest accident.
MIN_RECOVERED = 2


def control_spans(text: str) -> list[tuple[int, int]]:
    """Runs of control characters (form feed, tab and line ends excepted)."""
    return [(m.start(), m.end()) for m in CONTROL_RUN.finditer(text)]


# A run this long recovering in full is mojibake whatever the page holds; a shorter one (a
# two-character Chinese word such as 目录 re-encodes to valid UTF-8 now and then) only on a page
# where most East Asian runs recover: one whose other text is not East Asian.
LONG_RUN = 4
MOSTLY = 0.5
# To locate damage on a page already flagged, a long run needs three quarters of its bytes back
# (`legacy_codecs`' per-run test: a CJK character's three bytes straddle the U+FFFD where the
# codec cut them); to flag a page, all of them (genuine Chinese recovers three quarters of a
# four-character run now and then).
LOCATE_SHARE = 0.75


def legacy_runs(
    text: str, long_share: float = 1.0, codecs: tuple[str, ...] = CODECS
) -> tuple[str, list[tuple[int, int]]]:
    """(codec, runs) of UTF-8 read as a legacy East Asian codec: of `codecs`, the one whose
    kept runs cover the most characters, and those runs (not joined)."""
    return legacy_runs_all([text], [codecs], long_share)[0]


# `_RUN` holding an `_EAST_ASIAN` character, as one Rust regex (leftmost-first: the whole run).
_EA_RUN_RS = f"{_RUN.pattern[:-1]}*{_EAST_ASIAN.pattern}{_RUN.pattern[:-1]}*"


def _hits(runs: list[str], lengths: np.ndarray, codec: str, long_share: float) -> np.ndarray:
    """Per run: the codec encodes all of it, and all its high bytes (a long run `long_share`
    of them, at least MIN_RECOVERED) give back UTF-8 of one writing system."""
    r = reencode(runs, codec)
    share = np.where(lengths >= LONG_RUN, long_share, 1.0)
    ok = (r.dropped == 0) & (r.valid >= MIN_RECOVERED) & (r.valid >= share * r.high)
    for j in np.flatnonzero(ok):
        ok[j] = _one_script(r.kept(j))
    return ok


def legacy_runs_all(
    texts: list[str], codecs: list[tuple[str, ...]], long_share: float = 1.0
) -> list[tuple[str, list[tuple[int, int]]]]:
    """`legacy_runs` of every text with its own codecs: the runs of all texts re-encoded
    together, one encode per codec (`reencode`)."""
    # The runs holding an East Asian character, cut out natively (one list per text): Python
    # sees the run strings, and finds positions only on the few texts that keep some.
    found = pl.Series(texts, dtype=pl.Utf8).str.extract_all(_EA_RUN_RS).to_list()
    bounds = np.cumsum([0] + [len(f or ()) for f in found])
    runs = [r for f in found for r in f or ()]
    lengths = np.array([len(r) for r in runs], dtype=np.int64)
    hits: dict[str, np.ndarray] = {}
    for codec in CODECS:
        docs = [i for i, cs in enumerate(codecs) if codec in cs and found[i]]
        if not docs:
            continue
        idx = np.concatenate([np.arange(bounds[i], bounds[i + 1]) for i in docs])
        hits[codec] = np.zeros(len(runs), dtype=bool)
        hits[codec][idx] = _hits([runs[j] for j in idx], lengths[idx], codec, long_share)
    out = []
    for i, cs in enumerate(codecs):
        a, b = int(bounds[i]), int(bounds[i + 1])
        best_codec, best, best_chars = "", np.zeros(0, np.int64), 0
        for codec in cs if b > a else ():
            hit = hits[codec][a:b]
            mostly = hit.sum() >= MOSTLY * (b - a)
            keep = np.flatnonzero(hit & (mostly | (lengths[a:b] >= LONG_RUN)))
            chars = int(lengths[a:b][keep].sum())
            if chars > best_chars:
                best_codec, best_chars = codec, chars
                best = keep
        spans = []
        if len(best):
            runs_i = [m.span() for m in _RUN.finditer(texts[i]) if _EAST_ASIAN.search(m.group(0))]
            spans = [runs_i[k] for k in best]
        out.append((best_codec, spans))
    return out


def legacy_spans(text: str) -> list[tuple[int, int]]:
    """`legacy_runs` joined along a line (the span covers the damaged sentence)."""
    return _join(text, legacy_runs(text, LOCATE_SHARE)[1])


def _join(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in spans:
        if out and a - out[-1][1] <= JOIN_GAP and "\n" not in text[out[-1][1] : a]:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def damage_spans(text: str) -> list[tuple[int, int]]:
    """Control-character and legacy-codec spans of `text`, sorted (not merged)."""
    return sorted(control_spans(text) + legacy_spans(text))
