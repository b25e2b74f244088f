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

CODECS: tuple[str, ...] = ("gbk", "shift_jis", "big5", "euc_kr")
CODEC_NAMES = {"gbk": "GBK", "shift_jis": "Shift-JIS", "big5": "Big5", "euc_kr": "EUC-KR"}

# Runs of non-ASCII characters; U+FFFD splits runs because it has no bytes in any legacy codec.
_RUN = re.compile(r"[^\x00-\x7f\ufffd]+")
_HIGH_BYTES = bytes(range(0x80, 0x100))

# A run counts as recovered when at least this share of its high bytes decode as UTF-8.
RECOVERED_SHARE = 0.75


@dataclass(frozen=True)
class LegacyEvidence:
    """Per document: the best codec and how much of the text re-encodes to valid UTF-8.

    `recovered_bytes`: high (>= 0x80) bytes in runs that became valid UTF-8 under `codec`.
    `candidate_bytes`: high bytes of all runs that `codec` could encode at all.
    `recovered_chars`: characters (in the mojibake) of the recovered runs.
    `runs`: number of recovered runs; `long_runs`: those with >= LONG_RUN_BYTES high bytes, which
    genuine CJK text essentially never produces by chance.
    `example`: the first recovered run and what it decodes to.
    """

    codec: str
    recovered_bytes: int
    candidate_bytes: int
    recovered_chars: int
    runs: int
    long_runs: int
    example: tuple[str, str] | None


_NONE = LegacyEvidence("", 0, 0, 0, 0, 0, None)
LONG_RUN_BYTES = 8


def _high(b: bytes) -> int:
    return len(b) - len(b.translate(None, _HIGH_BYTES))


def _run_recovery(run: str, codec: str) -> tuple[int, int, str] | None:
    """(high bytes, recovered high bytes, decoded) for one run; None if `codec` cannot encode it."""
    try:
        raw = run.encode(codec)
    except UnicodeEncodeError:
        return None
    high = _high(raw)
    if high == 0:
        return None
    decoded = raw.decode("utf-8", errors="replace")
    if decoded.count("\ufffd") == 0:
        return high, high, decoded
    kept = decoded.replace("\ufffd", "")
    valid_high = len(kept.encode("utf-8")) - len(kept.encode("ascii", errors="ignore"))
    return high, valid_high, decoded


def _one_script(decoded: str) -> bool:
    """Recovered text should be one writing system (plus punctuation), as real text is.

    Some genuine Hangul and Han sequences happen to re-encode to valid 2-byte UTF-8, but the
    result mixes Latin Extended, IPA, Greek and Cyrillic in one word; real mojibake recovers
    accented Latin, or Cyrillic, or CJK, not a salad of blocks.
    """
    blocks = set()
    for ch in decoded:
        o = ord(ch)
        if o < 0xC0 or 0x2000 <= o <= 0x206F or 0x3000 <= o <= 0x303F or o == 0xFFFD:
            continue  # ASCII, Latin-1 symbols, general and CJK punctuation go with any script
        if 0x4E00 <= o <= 0x9FFF or 0x3040 <= o <= 0x30FF or 0xFF00 <= o <= 0xFFEF:
            blocks.add("cjk")
        elif 0xAC00 <= o <= 0xD7AF or 0x1100 <= o <= 0x11FF or 0x3130 <= o <= 0x318F:
            blocks.add("hangul")
        elif o < 0x250 or 0x1E00 <= o <= 0x1EFF:
            blocks.add("latin")
        else:
            blocks.add(o >> 7)
        if len(blocks) > 1:
            return False
    return True


def legacy_evidence(text: str) -> LegacyEvidence:
    """Re-encode the non-ASCII runs of `text` with each legacy codec; keep the best explanation."""
    runs = _RUN.findall(text)
    if not runs:
        return _NONE
    best = _NONE
    for codec in CODECS:
        recovered = candidate = chars = n_runs = n_long = 0
        example = None
        for run in runs:
            res = _run_recovery(run, codec)
            if res is None:
                continue
            high, valid, decoded = res
            candidate += high
            if valid >= RECOVERED_SHARE * high and valid > 0 and _one_script(decoded):
                recovered += high
                chars += len(run)
                n_runs += 1
                n_long += high >= LONG_RUN_BYTES
                if example is None or (len(run) > len(example[0]) and len(example[0]) < 4):
                    example = (run[:12], decoded.replace("\ufffd", "")[:12])
        if recovered > best.recovered_bytes:
            best = LegacyEvidence(codec, recovered, candidate, chars, n_runs, n_long, example)
    return best
