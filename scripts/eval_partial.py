"""Partial corruptions: one to three damaged sentences inside a long clean page, with their spans.

A pipeline that breaks for a moment leaves most of a page clean: a few sentences decoded with the
wrong codec (UTF-8 read as GBK or cp1252) or a handful of control characters inside words. The
scorer must flag the page and say where: each row carries `spans`, the [start, end) character
ranges of the damaged text in the final document, which `scripts/bench_score.py` compares with
the ranges the scorer reports.
"""

from __future__ import annotations

import random
import re

_SENTENCE = re.compile(r"[^\n.!?。！？]{30,300}[.!?。！？]")
_LETTER_PAIR = re.compile(r"(?<=[^\W\d_])(?=[^\W\d_])")
_CONTROLS = [chr(c) for c in range(1, 32) if c not in (9, 10, 12, 13)] + ["\x7f"]


def _non_ascii(s: str) -> int:
    return sum(ord(c) > 127 for c in s)


def _mojibake(codec: str):
    def f(s: str, rnd: random.Random) -> str:
        return s.encode("utf-8").decode(codec, errors="replace")

    return f


def _controls(s: str, rnd: random.Random) -> str:
    spots = [m.start() for m in _LETTER_PAIR.finditer(s)]
    for p in sorted(rnd.sample(spots, min(len(spots), rnd.randint(1, 3))), reverse=True):
        s = s[:p] + rnd.choice(_CONTROLS) + s[p:]
    return s


KINDS = {
    "partial_gbk": _mojibake("gbk"),
    "partial_cp1252": _mojibake("cp1252"),
    "partial_controls": _controls,
}


def damage(text: str, kind: str, rnd: random.Random) -> tuple[str, list[tuple[int, int]]] | None:
    """`text` with 1-3 sentences damaged by `kind`, and the damaged ranges; None when the page
    has no sentence the corruption changes."""
    fn = KINDS[kind]
    cands = [m for m in _SENTENCE.finditer(text)]
    if kind != "partial_controls":
        cands = [m for m in cands if _non_ascii(m.group(0)) >= 2]
    if not cands:
        return None
    picked = sorted(rnd.sample(cands, min(len(cands), rnd.randint(1, 3))), key=lambda m: m.start())
    out, spans, pos = [], [], 0
    for m in picked:
        out.append(text[pos : m.start()])
        start = sum(map(len, out))
        bad = fn(m.group(0), rnd)
        out.append(bad)
        if bad != m.group(0):
            spans.append((start, start + len(bad)))
        pos = m.end()
    out.append(text[pos:])
    return ("".join(out), spans) if spans else None


def sentence_docs(pages: list[str], per_kind: int, rnd: random.Random) -> list[dict]:
    """`per_kind` pages of each kind, from clean pages of at least 2,000 characters."""
    long_pages = [p for p in pages if len(p) >= 2000]
    out: list[dict] = []
    for kind in KINDS:
        pool = (
            long_pages
            if kind == "partial_controls"
            else [p for p in long_pages if _non_ascii(p) >= 20]
        )
        tries = 0
        made = 0
        while made < per_kind and pool and tries < per_kind * 20:
            tries += 1
            hit = damage(rnd.choice(pool), kind, rnd)
            if hit is None:
                continue
            text, spans = hit
            out.append(
                {
                    "text": text,
                    "label": "garbage",
                    "kind": kind,
                    "partial": True,
                    "spans": [list(s) for s in spans],
                }  # fmt: skip
            )
            made += 1
    return out
