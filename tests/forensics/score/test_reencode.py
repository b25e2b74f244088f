"""`reencode`'s per-piece counts against CPython's own UTF-8 decoder and legacy codecs.

The compiled pass must count exactly what decoding each piece on its own with
errors="replace" and dropping U+FFFD gives back, whatever the bytes: overlong forms,
surrogates, code points above U+10FFFF, truncated sequences, U+FFFD spelled in the bytes.
"""

from __future__ import annotations

import random

import numpy as np

from forensics.score.reencode import _piece_counts, reencode


def _python_counts(raw: bytes) -> tuple[int, int, int]:
    """(high bytes, high bytes in valid sequences, non-ASCII characters), as CPython decodes."""
    high = sum(b >= 0x80 for b in raw)
    kept = raw.decode("utf-8", errors="replace").replace("\ufffd", "")
    valid = len(kept.encode("utf-8")) - (len(raw) - high)
    return high, valid, sum(ord(ch) >= 0x80 for ch in kept)


def test_counts_match_cpython_on_hostile_bytes() -> None:
    rnd = random.Random(7)
    edge = [
        b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xef\xbf\xbd",
        b"\xe4\xb8", b"\xf0\x9f\x98", b"\xc3\xa9", b"\xe4\xb8\xad", b"\xf0\x9f\x98\x80", b"\xff",
    ]  # fmt: skip
    pieces = []
    for _ in range(3000):
        parts = [rnd.choice(edge) if rnd.random() < 0.5 else bytes([rnd.randrange(1, 256)])
                 for _ in range(rnd.randrange(0, 12))]  # fmt: skip
        pieces.append(b"".join(parts).replace(b"\x00", b" "))
    data = np.frombuffer(b"\x00".join(pieces), np.uint8)
    high, valid, chars, start, end = _piece_counts(data, 0)
    for j, raw in enumerate(pieces):
        assert (int(high[j]), int(valid[j]), int(chars[j])) == _python_counts(raw), raw
        assert bytes(data[start[j] : end[j]]) == raw


def test_reencode_counts_each_piece_as_if_encoded_alone() -> None:
    """Mojibake, genuine Chinese, a bullet GBK cannot encode, a literal `?`, a NUL."""
    mojibake = "Ação e informação".encode().decode("gbk", errors="replace")
    pieces = [mojibake, "用户家目录", "•   用户主目录?", "数据\x00库", "plain ASCII", "¥ 中文 ‾"]
    for codec in ("gbk", "shift_jis", "big5", "euc_kr"):
        r = reencode(pieces, codec)
        for j, piece in enumerate(pieces):
            raw = piece.replace("\x00", " ").replace("?", " ").encode(codec, errors="ignore")
            replaced = piece.encode(codec, errors="replace").count(b"?") - piece.count("?")
            assert int(r.dropped[j]) == replaced, (codec, piece)
            assert (int(r.high[j]), int(r.valid[j]), int(r.chars[j])) == _python_counts(raw)
            want = raw.decode("utf-8", errors="replace").replace("\ufffd", "")
            assert r.kept(j) == want
    assert reencode([], "gbk").high.shape == (0,)
