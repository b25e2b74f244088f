"""Damage located as character spans: a few broken sentences in a long clean page are marked,
and the clean look-alikes (genuine Chinese, Japanese and Korean text, curly quotes, tabs and form
feeds in a manual) are not."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from forensics.report.drilldown import marked_spans
from forensics.score.locate import damage_spans

CJK = Path(sys.base_prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
CJK = CJK / "test" / "cjkencodings"

MANUAL = (
    "CREATE TABLE\n\tcreate a new table\n\n"
    "CREATE TABLE will create a new, initially empty table in the current database. The table "
    "will be owned by the user issuing the command. “Quoted” names keep their case; the "
    "‘default’ tablespace is used.\n\f\n"
    "Parameters\n\tIF NOT EXISTS\n\t\tDo not throw an error if a relation with the same name "
    "already exists. — Café, naïve and Zürich are spelled with their accents.\n"
) * 6


def _cjk_texts() -> list[str]:
    files = sorted(CJK.glob("*-utf8.txt"))
    if not files:
        pytest.skip("CPython's cjkencodings test texts are not installed")
    return [f.read_text(encoding="utf-8") for f in files]


def _damaged(text: str, sentence: str, bad: str) -> tuple[str, tuple[int, int]]:
    i = text.index(sentence)
    return text[:i] + bad + text[i + len(sentence) :], (i, i + len(bad))


SENTENCE = "Café, naïve and Zürich are spelled with their accents."


@pytest.mark.parametrize("codec", ["gbk", "shift_jis", "big5", "euc_kr", "cp1252"])
def test_one_mojibake_sentence_in_a_long_page_is_marked(codec: str) -> None:
    bad = SENTENCE.encode("utf-8").decode(codec, errors="replace")
    doc, (a, b) = _damaged(MANUAL, SENTENCE, bad)
    spans = marked_spans(doc)
    assert any(x < b and a < y for x, y in spans), (codec, bad)
    # Only the damaged sentence is marked: nothing before it or after it.
    assert all(a <= x and y <= b for x, y in spans), [doc[x:y] for x, y in spans]


def test_control_characters_inside_words_are_marked() -> None:
    doc = MANUAL.replace("initially", "init\x03ially", 1).replace("owned", "ow\x1bned", 1)
    marked = [doc[x:y] for x, y in marked_spans(doc)]
    assert marked == ["\x03", "\x1b"]


def test_clean_manual_has_no_spans() -> None:
    assert damage_spans(MANUAL) == []
    assert marked_spans(MANUAL) == []


def test_genuine_cjk_text_has_no_spans() -> None:
    for text in _cjk_texts():
        assert damage_spans(text) == [], text[:80]


def test_gbk_mojibake_of_a_chinese_sentence_inside_a_chinese_page_is_marked_alone() -> None:
    chinese = next(t for t in _cjk_texts() if "中文" in t or "文件" in t or "的" in t)
    lines = [ln for ln in chinese.splitlines() if len(ln) >= 20]
    sentence = lines[len(lines) // 2]
    bad = sentence.encode("utf-8").decode("gbk", errors="replace")
    doc, (a, b) = _damaged(chinese, sentence, bad)
    spans = damage_spans(doc)
    assert spans and all(a <= x and y <= b for x, y in spans), [doc[x:y] for x, y in spans]
