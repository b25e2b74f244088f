"""UTF-8 bytes read as GBK, Shift-JIS, Big5 or EUC-KR: detect by undoing the mistake.

ftfy does not cover these (measured recall 0.03-0.05): the wrong decoder turns UTF-8 into valid
but meaningless Han, Hangul or half-width katakana, which no single-character rule can tell from
real Chinese, Japanese or Korean. The bytes can: re-encode each run of non-ASCII characters with
the suspected codec and ask whether the result is valid UTF-8. For mojibake it almost always is
(we recover the original bytes); for genuine CJK text a long run is valid UTF-8 only by chance
(each GBK/Big5/EUC-KR pair has a ~10% chance of looking like a 2-byte UTF-8 sequence, so a run of
several characters essentially never passes).

Python does the per-run work, but only on documents that contain East Asian characters at all
(found by one polars pass), and each step is a C-level encode/decode, not a per-character loop.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from forensics.score.reencode import reencode

CODECS: tuple[str, ...] = ("gbk", "shift_jis", "big5", "euc_kr")
CODEC_NAMES = {"gbk": "GBK", "shift_jis": "Shift-JIS", "big5": "Big5", "euc_kr": "EUC-KR"}

# Runs of non-ASCII characters; U+FFFD splits runs because it has no bytes in any legacy codec.
_RUN = re.compile(r"[^\x00-\x7f\ufffd]+")
_HIGH_BYTES = bytes(range(0x80, 0x100))
_EAST_ASIAN = re.compile(
    "[\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff61-\uff9f]"
)


@dataclass(frozen=True)
class LegacyEvidence:
    """Per document: the best codec and how much of the text re-encodes to valid UTF-8.

    `recovered_bytes`: high (>= 0x80) bytes that became valid UTF-8 multi-byte characters when
        the text was re-encoded with `codec`; `candidate_bytes`: all high bytes of that encoding.
    `segments`, `segment_chars`: blocks of lines (see `_segments`) that mostly recover, and their
        characters. `runs`: recovered runs of non-ASCII characters in the first such block, and
        `example`: one of them with what it decodes to (for the reason string).
    """

    codec: str
    recovered_bytes: int
    candidate_bytes: int
    segments: int
    segment_chars: int
    runs: int
    example: tuple[str, str] | None


_NONE = LegacyEvidence("", 0, 0, 0, 0, 0, None)
SEGMENT_CHARS = 400
# A block is mojibake when its recovered bytes reach this share of its high bytes...
SEGMENT_SHARE = 0.6
# ...and at least this many bytes (one accented letter is 2 bytes; a CJK character 3).
SEGMENT_MIN_BYTES = 6
# ...and at least this many recovered non-ASCII characters (two CJK characters can re-encode to
# one valid Greek letter by chance; three accented letters of mojibake recover as three).
SEGMENT_MIN_CHARS = 3
# A document needs two such blocks, or one block with this many recovered bytes.
DOC_MIN_BYTES = 6
# A character the codec cannot encode (a bullet `•` in GBK, Hangul in Shift-JIS) cannot be that
# codec's output, so it counts against the block as this many high bytes that did not recover.
# (U+FFFD is neutral: it is what a lossy legacy decode leaves where bytes were invalid.)
UNENCODABLE_BYTES = 2


def _high(b: bytes) -> int:
    return len(b) - len(b.translate(None, _HIGH_BYTES))


def _recovery(raw: bytes) -> tuple[int, int, str]:
    """(high bytes, high bytes that decode as UTF-8, the decoded text without U+FFFD)."""
    high = _high(raw)
    kept = raw.decode("utf-8", errors="replace").replace("\ufffd", "")
    # Every ASCII byte decodes as itself (never part of an invalid sequence), so the ASCII
    # characters of `kept` are the len(raw) - high ASCII bytes of `raw`.
    valid_high = len(kept.encode("utf-8")) - (len(raw) - high)
    return high, valid_high, kept


# A block that gives back most but not all of its high bytes (below FULL_SHARE) is either
# mojibake with some bytes lost or genuine CJK recovering by chance; what it gives back tells them
# apart. Chance lands a Han character's two GBK / Big5 / EUC-KR bytes anywhere in the two-byte
# UTF-8 range U+0080-U+07FF, most of which no running text is written in (fractions, spacing
# accents, Hebrew points, the Cyrillic Supplement, Syriac, Thaana): 用户家目录 gives back `ûĿ¼`,
# 预设值 `Ԥֵװ`, 網路裝置支援 `·֧Ԯ`. Mojibake gives back the text it was (accented Latin, Greek,
# Cyrillic, CJK). More than MAX_IMPLAUSIBLE of the recovered non-ASCII characters outside the
# alphabets below rejects the block.
FULL_SHARE = 0.9
MAX_IMPLAUSIBLE = 0.25
_TEXT_2BYTE = (
    "\u00a0-\u00a3\u00a5\u00a7\u00a9-\u00ab\u00ad\u00ae\u00b0-\u00b3\u00b5\u00b7\u00ba\u00bb"
    "\u00bf-\u0137\u0139-\u013e\u0141-\u0148\u014a-\u017e"  # Latin-1 and Extended-A letters
    "\u01a0\u01a1\u01af\u01b0"  # Vietnamese horned o and u
    "\u0386-\u03ce\u0400-\u045f\u0490-\u04ff\u0531-\u0587\u05d0-\u05ea"  # Greek..Hebrew
    "\u060c-\u06d5\u06f0-\u06f9"  # Arabic and Persian letters, marks and digits
)
_IMPLAUSIBLE = re.compile(f"[^\x00-\x7f{_TEXT_2BYTE}\u0800-\U0010ffff]")


def _plausible(decoded: str, non_ascii: int) -> bool:
    """Whether at most MAX_IMPLAUSIBLE of the `non_ascii` recovered characters of `decoded` lie
    outside the alphabets text is written in (see `_TEXT_2BYTE`)."""
    return len(_IMPLAUSIBLE.findall(decoded)) <= MAX_IMPLAUSIBLE * non_ascii


def _one_script(decoded: str) -> bool:
    """Recovered text should be one writing system (plus punctuation), as real text is.

    Some genuine Hangul and Han sequences happen to re-encode to valid 2-byte UTF-8, but the
    result mixes Latin Extended, IPA, Greek and Cyrillic in one word; real mojibake recovers
    accented Latin, or Cyrillic, or CJK, not a salad of blocks.
    """
    blocks = set()
    for ch in set(decoded):  # the answer does not depend on order or repeats
        o = ord(ch)
        if o < 0xC0 or 0x2000 <= o <= 0x2BFF or 0x3000 <= o <= 0x303F or o == 0xFFFD:
            continue  # ASCII, Latin-1 symbols, punctuation, currency, arrows, maths: any script
        if 0x180 <= o <= 0x36F and not 0x1A0 <= o <= 0x1B0 or 0xE000 <= o <= 0xF8FF or o > 0xEFFFF:
            return False  # Latin Extended-B, IPA, modifiers, private use: not what text is made of
        if 0x4E00 <= o <= 0x9FFF or 0x3040 <= o <= 0x30FF or 0xFF00 <= o <= 0xFFEF:
            blocks.add("cjk")
        elif 0xAC00 <= o <= 0xD7AF or 0x1100 <= o <= 0x11FF or 0x3130 <= o <= 0x318F:
            blocks.add("hangul")
        elif o < 0x250 or 0x1E00 <= o <= 0x1EFF:
            blocks.add("latin")
        else:
            blocks.add(o >> 8)  # 256-code-point blocks: Greek, Cyrillic, Hebrew, Arabic...
        if len(blocks) > 1:
            return False
    return True


def _segments(text: str) -> list[str]:
    """Paragraphs (split at blank lines), cut into blocks of about SEGMENT_CHARS characters.

    The share of recovered bytes is judged per block, so one mojibake paragraph is not diluted by
    genuine CJK, Greek or Cyrillic text elsewhere in the document.
    """
    out: list[str] = []
    cur: list[str] = []
    size = 0
    for line in text.split("\n"):
        if not line.strip() or size >= SEGMENT_CHARS:
            if cur:
                out.append("\n".join(cur))
            cur, size = [], 0
        if line.strip():
            cur.append(line)
            size += len(line)
    if cur:
        out.append("\n".join(cur))
    return out


def _example_runs(segment: str, codec: str) -> tuple[int, tuple[str, str] | None]:
    """Recovered runs of one flagged block, and the most telling one (for the reason)."""
    n = 0
    example = None
    for run in _RUN.findall(segment):
        try:
            high, valid, kept = _recovery(run.encode(codec))
        except UnicodeEncodeError:
            continue
        if high and valid >= 0.75 * high:
            n += 1
            if example is None or (len(run) > len(example[0]) and len(example[0]) < 4):
                example = (run[:12], kept[:12])
    return n, example


def _codec_blocks(
    segments: list[str], sizes: np.ndarray, owner: np.ndarray, n_docs: int, codec: str
) -> dict:
    """Re-encode the blocks of many pages with `codec` (`reencode`: one encode, one compiled
    pass) and sum, per page (`owner[j]`: the page of block j), what `legacy_evidence` compares
    across codecs (`sizes`: per block, its characters and its U+FFFD; 2-D): `recovered` and
    `candidate` high bytes, and the mojibake blocks (`n_bad`,
    `bad_chars`, `bad_bytes`, `first_bad`: the first one's index, -1 when none). Python
    decodes only the blocks whose byte counts already pass, to ask what they give back.

    A character the codec cannot encode is dropped from the bytes but counted against its block
    (UNENCODABLE_BYTES): dropping it silently would let the bytes around a bullet or an emoji
    stand for the whole block (a Chinese list item `•   用户主目录` recovered 6 of its 10 GBK
    bytes by chance, `ûĿ¼`, just at the block threshold, with the bullet left out)."""
    r = reencode(segments, codec)
    lengths, fffd = sizes
    missing = r.dropped - fffd
    high = r.high + UNENCODABLE_BYTES * missing
    has = r.high > 0
    passing = has & (r.valid >= SEGMENT_MIN_BYTES) & (r.valid >= SEGMENT_SHARE * high)
    bad = np.zeros(len(segments), dtype=bool)
    for j in np.flatnonzero(passing & (r.chars >= SEGMENT_MIN_CHARS)):
        kept = r.kept(j)
        plausible = r.valid[j] >= FULL_SHARE * high[j] or _plausible(kept, int(r.chars[j]))
        bad[j] = _one_script(kept) and plausible
    first_bad = np.full(n_docs, -1, dtype=np.int64)
    hit = np.flatnonzero(bad)  # ascending, and `owner` never decreases: a page's first comes first
    pages, first = np.unique(owner[hit], return_index=True)
    first_bad[pages] = hit[first]
    return {
        "recovered": np.bincount(owner, np.where(has, r.valid, 0), n_docs).astype(np.int64),
        "candidate": np.bincount(owner, np.where(has, high, 0), n_docs).astype(np.int64),
        "n_bad": np.bincount(owner[bad], minlength=n_docs),
        "bad_chars": np.bincount(owner, np.where(bad, lengths, 0), n_docs).astype(np.int64),
        "bad_bytes": np.bincount(owner, np.where(bad, r.valid, 0), n_docs).astype(np.int64),
        "first_bad": first_bad,
    }


def legacy_evidence(text: str) -> LegacyEvidence:
    """Re-encode `text` block by block with each legacy codec; keep the best explanation."""
    return legacy_evidence_all([text])[0]


def legacy_evidence_all(texts: list[str]) -> list[LegacyEvidence]:
    """`legacy_evidence` of every text: the blocks of all of them re-encoded together, one
    encode and one compiled pass per codec (`_codec_blocks`); Python looks at single runs only
    inside a block that is already flagged, to write the reason."""
    # A legacy East Asian decoder turns UTF-8 into Han, Hangul or kana: blocks without any
    # cannot be its output (this skips Cyrillic, Greek, Arabic and accented Latin text).
    per_doc = [[seg for seg in _segments(t) if _EAST_ASIAN.search(seg)] for t in texts]
    segments = [seg for segs in per_doc for seg in segs]
    owner = np.repeat(np.arange(len(texts)), [len(segs) for segs in per_doc])
    sizes = np.array([[len(seg), seg.count("\ufffd")] for seg in segments], np.int64).T
    sizes = sizes.reshape(2, len(segments))
    by_codec = {c: _codec_blocks(segments, sizes, owner, len(texts), c) for c in CODECS}
    out = []
    for i, segs in enumerate(per_doc):
        best, best_seg = _NONE, -1
        if not segs:
            out.append(best)
            continue
        for codec, v in by_codec.items():
            n_bad, bad_chars = int(v["n_bad"][i]), int(v["bad_chars"][i])
            if n_bad < 2 and v["bad_bytes"][i] < DOC_MIN_BYTES:
                n_bad = bad_chars = 0  # one short line recovering by chance is not evidence
            recovered = int(v["recovered"][i])
            if (bad_chars, recovered) > (best.segment_chars, best.recovered_bytes):
                candidate = int(v["candidate"][i])
                best = LegacyEvidence(codec, recovered, candidate, n_bad, bad_chars, 0, None)
                best_seg = int(v["first_bad"][i])
        if best.segments:
            runs, example = _example_runs(segments[best_seg], best.codec)
            best = LegacyEvidence(
                best.codec, best.recovered_bytes, best.candidate_bytes, best.segments,
                best.segment_chars, runs, example,
            )  # fmt: skip
        out.append(best)
    return out
