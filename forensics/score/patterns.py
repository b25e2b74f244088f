"""Regular expressions for encoding-garbage evidence, written for polars (Rust `regex`).

Why Rust regex: polars runs `str.count_matches` over a whole column in native code on every core,
so one pass per pattern costs microseconds per document instead of a Python loop. ftfy's own
mojibake heuristic (`ftfy.badness.BADNESS_RE`) is a Python verbose pattern; `ftfy_badness_pattern`
converts it to an equivalent non-verbose pattern so we reuse ftfy's knowledge unchanged.
"""

from __future__ import annotations

from functools import cache


def _unverbose(pattern: str) -> str:
    """Strip `re.VERBOSE` whitespace and comments outside character classes.

    Inside a class, Python keeps whitespace literally; we escape it so the result means the same
    in any engine.
    """
    out: list[str] = []
    in_class = False
    i = 0
    n = len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "\\" and i + 1 < n:
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if ch == "]":
                in_class = False
                out.append(ch)
            elif ch.isspace():
                out.append(f"\\x{{{ord(ch):X}}}")
            elif ch in "[&~":
                # Rust treats `[`, `&&`, `~~` inside a class as set operations: escape them.
                out.append("\\" + ch)
            else:
                out.append(ch)
            i += 1
            continue
        if ch == "[":
            in_class = True
            out.append(ch)
        elif ch == "#":
            while i < n and pattern[i] != "\n":
                i += 1
            continue
        elif ch.isspace():
            pass
        else:
            out.append(ch)
        i += 1
    return "".join(out)


@cache
def ftfy_badness_pattern() -> str:
    """ftfy's mojibake heuristic (`ftfy.badness.BADNESS_RE`) as a Rust-compatible pattern."""
    from ftfy.badness import BADNESS_RE

    return _unverbose(BADNESS_RE.pattern)


def _cp1252_continuations() -> str:
    """The characters a UTF-8 continuation byte (0x80-0xBF) becomes when read as cp1252/latin-1."""
    chars = {chr(b) for b in range(0x80, 0xC0)}  # latin-1 reading (C1 controls and 0xA0-0xBF)
    for b in range(0x80, 0xA0):
        try:
            chars.add(bytes([b]).decode("cp1252"))
        except UnicodeDecodeError:
            pass  # five bytes are undefined in cp1252; decoders emit U+FFFD or the C1 control
    return "".join(sorted(chars))


# Patterns below use only syntax that Python `re` and Rust `regex` read alike (literal characters,
# \xHH, \uHHHH, \UHHHHHHHH), so the same string counts in polars and finds examples in Python.

_CONT = f"[{_cp1252_continuations()}]"

# A UTF-8 multi-byte sequence read one byte per character as cp1252 or latin-1: a lead byte
# (0xC2-0xF4 as a Latin-1 letter such as Ã, â, ð) followed by exactly the right number of
# continuation-byte characters. Every match re-encodes to valid UTF-8 by construction.
UTF8_AS_CP1252 = f"[\xc2-\xdf]{_CONT}|[\xe0-\xef]{_CONT}{{2}}|[\xf0-\xf4]{_CONT}{{3}}"

# C0 controls except tab, line feed and carriage return, plus DEL.
C0_CONTROLS = r"[\x00-\x08\x0B\x0C\x0E-\x1F\x7F]"
C1_CONTROLS = r"[\x80-\x9F]"
NUL = r"\x00"
REPLACEMENT = r"\uFFFD"
PRIVATE_USE = r"[\uE000-\uF8FF\U000F0000-\U000FFFFD\U00100000-\U0010FFFD]"
# Private-use (Co) and unassigned or noncharacter (Cn) code points: Rust only (\p classes).
PRIVATE_OR_UNASSIGNED_RS = r"[\p{Co}\p{Cn}]"
# Characters a legacy East Asian decoder produces: Han, Hangul, kana, half-width katakana.
EAST_ASIAN_RS = r"[\p{Han}\p{Hangul}\p{Hiragana}\p{Katakana}\uFF61-\uFF9F]"
# UTF-16-LE text read byte-wise: every other character is NUL.
UTF16_INTERLEAVED = r"(?:[^\x00]\x00){4,}"

# Where a control character sits tells what put it there. Between two letters it is
# a broken pipeline's damage: one or two in a whole page are evidence. At a line edge or next
# to another control it is often a format's own markup (a form feed before a section, Info's
# NUL+backspace index markers): those are counted only when they are dense.
CONTROL_IN_WORD = r"[^\W\d_][\x00-\x08\x0B\x0C\x0E-\x1F\x7F\x80-\x9F][^\W\d_]"
# A format's own control markup, removed before counting: GNU Info's index markers
# (NUL, backspace, "[index", NUL, backspace, "]") and form feeds on a line of their own
# (page breaks in GNU sources and manuals).
FORMAT_CONTROLS = r"\x00\x08\[[^\x00\]\n]{0,20}\x00\x08\]|(?m)^\x0C+[ \t]*$"
# UTF-8 read as cp1252 glued to a lowercase ASCII letter ("AntÃ³nio", "donâ€™t"): a single one
# is evidence, where a free-standing "Ã©" needs company.
UTF8_AS_CP1252_IN_WORD = f"[a-z](?:{UTF8_AS_CP1252})|(?:{UTF8_AS_CP1252})[a-z]"
