"""Re-encode many pieces of one text with a legacy codec at once, and count what decodes as UTF-8.

Why: undoing UTF-8-read-as-GBK asks, for every block or run of a page and each of four codecs,
how many of its re-encoded high bytes form valid UTF-8. Asked piece by piece in Python that is
a dozen calls per piece (encode, retry without the characters the codec lacks, decode, strip
replacement characters, re-encode to count), most of a page's scoring time. Here the pieces (of
one page or of many) are joined by a separator byte and encoded in one call; the characters the
codec cannot encode are dropped and counted; one compiled pass over the bytes counts, per piece,
its high bytes, the high bytes inside valid UTF-8 sequences and the characters they decode to.

The counts are those of decoding each piece on its own with `errors="replace"` and dropping the
U+FFFD: the separator is ASCII, which ends any UTF-8 sequence, and a U+FFFD spelled by the bytes
themselves (EF BF BD) does not count as recovered.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dataloaders.lazy_jit import kernel


@kernel(cache=True, nogil=True)
def _piece_counts(data, sep):
    """Per piece of `data` (uint8, pieces separated by byte `sep`): (high bytes, high bytes in
    valid UTF-8 sequences other than U+FFFD, characters those sequences decode to, piece start,
    piece end). Decoding rules as CPython's UTF-8 decoder (no overlongs, surrogates or code
    points above U+10FFFF); after an invalid byte the scan resumes at the next byte, which gives
    the same valid sequences as CPython's resumption after the maximal invalid subpart."""
    n_pieces = 1
    for b in data:
        if b == sep:
            n_pieces += 1
    high = np.zeros(n_pieces, np.int64)
    valid = np.zeros(n_pieces, np.int64)
    chars = np.zeros(n_pieces, np.int64)
    start = np.zeros(n_pieces, np.int64)
    end = np.zeros(n_pieces, np.int64)
    p = 0
    i = 0
    n = len(data)
    while i < n:
        b = data[i]
        if b == sep:
            end[p] = i
            p += 1
            start[p] = i + 1
            i += 1
            continue
        if b < 0x80:
            i += 1
            continue
        high[p] += 1
        size = 0
        lo = 0x80
        hi = 0xBF
        if 0xC2 <= b <= 0xDF:
            size = 2
        elif 0xE0 <= b <= 0xEF:
            size = 3
            if b == 0xE0:
                lo = 0xA0
            elif b == 0xED:
                hi = 0x9F
        elif 0xF0 <= b <= 0xF4:
            size = 4
            if b == 0xF0:
                lo = 0x90
            elif b == 0xF4:
                hi = 0x8F
        ok = size > 0 and i + size <= n
        if ok:
            c = data[i + 1]
            ok = lo <= c <= hi
            for k in range(2, size):
                if ok:
                    c = data[i + k]
                    ok = 0x80 <= c <= 0xBF
        if not ok:
            i += 1
            continue
        high[p] += size - 1
        fffd = size == 3 and b == 0xEF and data[i + 1] == 0xBF and data[i + 2] == 0xBD
        if not fffd:
            valid[p] += size
            chars[p] += 1
        i += size
    end[p] = n
    return high, valid, chars, start, end


@kernel(cache=True, nogil=True)
def _byte_per_piece(data, sep, byte):
    """How often `byte` occurs in each piece of `data` (pieces separated by byte `sep`)."""
    n_pieces = 1
    for b in data:
        if b == sep:
            n_pieces += 1
    out = np.zeros(n_pieces, np.int64)
    p = 0
    for b in data:
        if b == sep:
            p += 1
        elif b == byte:
            out[p] += 1
    return out


@dataclass(frozen=True)
class Reencoded:
    """Pieces of text re-encoded with one codec; arrays are per piece, in order.

    `raw`: the joined bytes (pieces at raw[start[j]:end[j]]); `high`: bytes >= 0x80;
    `valid`: those inside valid UTF-8 sequences (U+FFFD excepted); `chars`: the non-ASCII
    characters they decode to; `dropped`: characters the codec could not encode (U+FFFD
    included)."""

    raw: bytes
    high: np.ndarray
    valid: np.ndarray
    chars: np.ndarray
    start: np.ndarray
    end: np.ndarray
    dropped: np.ndarray

    def kept(self, j: int) -> str:
        """Piece j's bytes decoded as UTF-8 with the invalid ones dropped (and U+FFFD too);
        its NUL and `?` characters read as spaces (`reencode`)."""
        piece = self.raw[int(self.start[j]) : int(self.end[j])]
        return piece.decode("utf-8", errors="replace").replace("\ufffd", "")


def reencode(pieces: list[str], codec: str) -> Reencoded:
    """Count, per piece, what its bytes in `codec` give back as UTF-8 (see the module doc).

    The pieces are joined by NUL, and a NUL or `?` inside a piece is read as a space: any
    ASCII byte ends a UTF-8 sequence alike and only high bytes are counted, so the counts do
    not change, and `?` is then free to mark the characters the codec cannot encode."""
    if not pieces:
        return Reencoded(b"", *(np.zeros(0, np.int64) for _ in range(6)))
    joined = "\x00".join(pieces)
    if joined.count("\x00") != len(pieces) - 1:
        joined = "\x00".join(p.replace("\x00", " ") for p in pieces)
    if "?" in joined:
        joined = joined.replace("?", " ")
    raw = joined.encode(codec, errors="replace")
    if b"?" in raw:
        # No multi-byte character of these codecs holds the byte 0x3F: every `?` is a
        # character the codec could not encode. Dropped, as errors="ignore" drops them.
        dropped = _byte_per_piece(np.frombuffer(raw, np.uint8), 0, 0x3F)
        raw = raw.replace(b"?", b"")
    else:
        dropped = np.zeros(len(pieces), np.int64)
    high, valid, chars, start, end = _piece_counts(np.frombuffer(raw, np.uint8), 0)
    return Reencoded(raw, high, valid, chars, start, end, dropped)
