"""Scoring: every garbage kind, every spam kind, clean multilingual text, and hostile input.

The documents here are small and built in the test (the benchmark's evaluation set is built
differently, from text found on the machine), so a pass means the rule works, not that it
memorised the bench.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import random
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from forensics.errors import ForensicsError
from forensics.score import FLAG_THRESHOLD, score_table

FRENCH = (
    "L’été dernier, nous sommes allés à la mer près de Nice. Les enfants ont nagé, "
    "mangé des crêpes et joué au ballon. « C’est génial ! » a dit ma fille. "
    "Le café coûtait 2,50 € et la crème glacée était délicieuse.\n"
)
GERMAN = (
    "Über die Brücke gehen Fußgänger täglich; die Straße ist schön und grün. Ärger gibt es nie.\n"
)
CHINESE = "今天天气很好，我们去公园散步。孩子们在草地上玩耍，老人们在树下下棋。晚上我们一起吃饭，聊天到很晚。\n"  # noqa: E501
JAPANESE = "今日はとても良い天気です。私たちは公園を散歩しました。子供たちは芝生で遊び、お年寄りは木の下で将棋を指していました。\n"  # noqa: E501
KOREAN = "오늘은 날씨가 아주 좋습니다. 우리는 공원을 산책했습니다. 아이들은 잔디밭에서 놀고 있었습니다.\n"  # noqa: E501
RUSSIAN = "Сегодня прекрасная погода. Мы гуляли в парке, дети играли на траве, а старики играли в шахматы.\n"  # noqa: E501
ARABIC = "الطقس جميل اليوم. ذهبنا إلى الحديقة، ولعب الأطفال على العشب، وجلس الكبار تحت الأشجار.\n"
ENGLISH = (
    "The scheduler assigns each job to the least loaded worker, then records the decision so a "
    "restart can replay it. When a worker fails, its jobs return to the queue with their retry "
    "count incremented, and the operator sees one line per failure in the log.\n"
)
CLEAN = {
    "french": FRENCH,
    "german": GERMAN,
    "chinese": CHINESE,
    "japanese": JAPANESE,
    "korean": KOREAN,
    "russian": RUSSIAN,
    "arabic": ARABIC,
    "english": ENGLISH,
    "all": FRENCH + GERMAN + CHINESE + JAPANESE + KOREAN + RUSSIAN + ARABIC + ENGLISH,
}


def _score(texts: list[str | None]) -> pl.DataFrame:
    return score_table(pl.DataFrame({"text": texts}, schema={"text": pl.Utf8}))


def _partial(bad_paragraph: str) -> str:
    """~3,000 characters of clean text with one corrupted paragraph in the middle."""
    return (ENGLISH * 6) + "\n" + bad_paragraph + "\n" + (ENGLISH * 6)


def test_clean_multilingual_text_is_not_flagged() -> None:
    out = _score(list(CLEAN.values()))
    for name, g, s in zip(CLEAN, out["garbage_score"], out["spam_score"], strict=True):
        assert g < FLAG_THRESHOLD, (name, g)
        assert s < FLAG_THRESHOLD, (name, s)
    assert (out["garbage_reason"] == "").all()


@pytest.mark.parametrize(
    ("name", "make", "expect"),
    [
        ("cp1252", lambda t: t.encode().decode("cp1252", "replace"), "cp1252"),
        ("latin1", lambda t: t.encode().decode("latin-1"), "UTF-8 decoded as"),
        (
            "double",
            lambda t: t.encode().decode("cp1252", "replace").encode().decode("cp1252", "replace"),
            "double-encoded",
        ),
        ("gbk", lambda t: t.encode().decode("gbk", "replace"), "GBK"),
        ("shift_jis", lambda t: t.encode().decode("shift_jis", "replace"), "Shift-JIS"),
        ("big5", lambda t: t.encode().decode("big5", "replace"), "Big5"),
        ("euc_kr", lambda t: t.encode().decode("euc_kr", "replace"), "EUC-KR"),
        ("utf16", lambda t: t.encode("utf-16-le").decode("latin-1"), "UTF-16"),
    ],
)
def test_encoding_mistakes_whole_and_partial(name, make, expect) -> None:
    whole = make(FRENCH * 3)
    partial = _partial(make(FRENCH))
    out = _score([whole, partial])
    for kind, score, reason in zip(
        ("whole", "partial"), out["garbage_score"], out["garbage_reason"], strict=True
    ):
        assert score >= FLAG_THRESHOLD, (name, kind, score)
        assert expect in reason, (name, kind, reason)
    assert out["garbage_score"][0] >= out["garbage_score"][1]  # more corrupted, higher score


def test_cjk_mojibake_of_cjk_text() -> None:
    out = _score([(CHINESE * 4).encode().decode("gbk", "replace")])
    assert out["garbage_score"][0] >= FLAG_THRESHOLD
    assert "GBK" in out["garbage_reason"][0]


def test_control_characters_replacement_and_private_use() -> None:
    rnd = random.Random(3)
    controls = "".join(
        c + (chr(rnd.randrange(1, 9)) if i % 7 == 0 else "") for i, c in enumerate(ENGLISH)
    )
    fffd = ENGLISH.replace("e", "\ufffd")
    pua = "".join(chr(0xE000 + i) if i % 9 == 0 else c for i, c in enumerate(ENGLISH))
    nul_run = ENGLISH + "\x00" * 64 + ENGLISH
    out = _score([controls, _partial(fffd), _partial(pua), nul_run])
    assert (out["garbage_score"] >= FLAG_THRESHOLD).all(), out
    assert "C0 control" in out["garbage_reason"][0]
    assert "U+FFFD" in out["garbage_reason"][1]
    assert "private-use" in out["garbage_reason"][2]


def test_binary_junk_whole_and_partial() -> None:
    rnd = random.Random(5)
    junk = bytes(rnd.randrange(256) for _ in range(600)).decode("latin-1")
    out = _score([junk, _partial(junk)])
    assert (out["garbage_score"] >= FLAG_THRESHOLD).all()
    assert "binary junk" in out["garbage_reason"][0]


def test_one_replacement_character_is_noise() -> None:
    out = _score([ENGLISH + "\ufffd" + ENGLISH, FRENCH + "\x0c" + FRENCH])
    assert (out["garbage_score"] < FLAG_THRESHOLD).all()
    assert 0 < out["garbage_score"][0] < FLAG_THRESHOLD


def test_template_pages_are_found_across_documents() -> None:
    rnd = random.Random(7)
    template = (
        "Need a reliable {s} in {c}? Our {c} {s} crew has served local families since {y}. "
        "We answer calls around the clock, quote prices before we start, and clean up after "
        "ourselves. Ask your neighbours in {c} about us, or call {p} for a visit this week. "
        "Every {s} on our team is licensed, insured and trained on the newest equipment."
    )
    cities = ["Austin", "Boston", "Denver", "Fresno", "Irvine", "Madison", "Norfolk", "Ogden",
              "Provo", "Quincy", "Reno", "Salem", "Tulsa", "Utica", "Waco", "Yuma"]  # fmt: skip
    pages = [
        template.format(
            s=rnd.choice(["plumber", "roofer", "locksmith"]),
            c=c,
            y=rnd.randint(1970, 2015),
            p=f"{rnd.randint(200, 999)}-555-{rnd.randint(1000, 9999)}",
        )
        for c in cities
    ]
    # Licence copies with other holders, and mirrors differing in a date and counters, are
    # copies, not slot-filled spam.
    out = _score(pages + _licences_and_mirrors() + list(CLEAN.values()))
    n = len(pages)
    assert (out["spam_score"][:n] >= FLAG_THRESHOLD).all()
    assert all("skeleton shared with" in r for r in out["spam_reason"][:n])
    assert (out["spam_score"][n:] < FLAG_THRESHOLD).all()


def test_per_document_spam_kinds() -> None:
    repeated = "\n".join(["Click here to claim your reward now.", "Offer ends tonight!"] * 25)
    nav = "\n".join(
        ["Home | About Us | Contact | Blog | Careers", "Sign in", "Cart", "Search", "Menu"]
        + ["We sell handmade soap from local farms."]
        + ["Privacy Policy", "Terms of Use", "Cookie Settings", "Follow us", "Facebook",
           "Twitter", "Instagram", "© 2024 Soapworks. All rights reserved.", "Back to top"]
    )  # fmt: skip
    words = ["loans", "pills", "casino", "watches", "shoes", "bags", "tickets", "bonus", "deals"]
    links = "\n".join(
        f"{words[i % 9]} {words[(i * 5) % 9]} - https://site{i}.example{i % 7}.biz/p{i}"
        for i in range(40)
    )
    stuffed = ", ".join(["cheap flights", "cheap flights online", "best cheap flights",
                         "flights cheap", "cheap flights deals"] * 12)  # fmt: skip
    out = _score([repeated, nav, links, stuffed])
    assert (out["spam_score"] >= FLAG_THRESHOLD).all(), out
    assert "duplicated" in out["spam_reason"][0] or "gram" in out["spam_reason"][0]
    assert "boilerplate" in out["spam_reason"][1]
    assert "link farm" in out["spam_reason"][2]
    assert out["spam_reason"][3]


def test_hostile_and_empty_input_never_crashes() -> None:
    big = (ENGLISH * 40_000)[:10_000_000]  # 10 MB
    out = _score([None, "", "   ", big, big[:5_000_000] + "\x00\x01\x02\x03\x04\x05" * 20])
    assert out.height == 5
    assert out["garbage_score"][0] == 0.0 and out["garbage_reason"][0] == ""
    assert out["garbage_score"][3] < FLAG_THRESHOLD
    assert out["garbage_score"][4] >= FLAG_THRESHOLD  # one dense burst in 5 MB is still found


def test_non_string_and_surrogates() -> None:
    obj = pl.Series(
        "text", ["ok text " * 20, 5, b"bytes \xff\xfe", "lone \ud800 surrogate"], dtype=pl.Object
    )
    out = score_table(pl.DataFrame({"id": [1, 2, 3, 4], "text": obj}))
    assert out.height == 4
    assert out["garbage_score"][1] == 0.0
    assert "non-string" in out["garbage_reason"][1]
    ints = score_table(pl.DataFrame({"text": [1, 2]}))
    assert (ints["garbage_score"] == 0.0).all()
    assert "non-string" in ints["garbage_reason"][0]


def test_api_contract_keeps_columns_and_order() -> None:
    df = pl.DataFrame(
        {"id": [3, 1, 2], "body": [FRENCH, CHINESE.encode().decode("gbk", "replace"), None]}
    )
    out = score_table(df, "body")
    assert out.columns == [
        "id",
        "body",
        "garbage_score",
        "spam_score",
        "garbage_reason",
        "spam_reason",
    ]
    assert out["id"].to_list() == [3, 1, 2]
    assert out.schema["garbage_score"] == pl.Float64 and out.schema["spam_reason"] == pl.Utf8
    assert out["garbage_score"][1] >= FLAG_THRESHOLD
    with pytest.raises(ForensicsError, match="not found"):
        score_table(df, "text")


def test_cli_scores_jsonl_to_parquet(tmp_path) -> None:
    src = tmp_path / "docs.jsonl"
    src.write_text(
        '{"id": 1, "text": "caf\\u00c3\\u00a9 na\\u00c3\\u00afve '
        '\\u00e2\\u20ac\\u0153quote\\u00e2\\u20ac"}\n'
        '{"id": 2, "text": "plain text"}\n',
        encoding="utf-8",
    )
    out = tmp_path / "scored.parquet"
    cmd = [sys.executable, "-m", "forensics.cli", "score", str(src), "--out", str(out), "--quiet"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    table = pl.read_parquet(out)
    assert table["id"].to_list() == [1, 2]
    assert table["garbage_score"][0] >= FLAG_THRESHOLD
    again = subprocess.run(cmd, capture_output=True, text=True)
    assert again.returncode == 2 and "already exists" in " ".join(again.stderr.split())
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "forensics.cli",
            "score",
            str(tmp_path / "missing.jsonl"),
            "--out",
            str(tmp_path / "x.parquet"),
        ],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "no such file" in " ".join(bad.stderr.split())


def _python_sources() -> list[str]:
    """Real Python source: whole stdlib and numpy modules (hundreds to thousands of lines) and
    each of their top-level functions and classes of 8+ lines, as code corpora hold them."""
    names = ("textwrap", "dataclasses", "json.decoder", "numpy.polynomial.polynomial",
             "numpy.lib.recfunctions", "numpy.ma.extras")  # fmt: skip
    files = [inspect.getsourcefile(importlib.import_module(m)) for m in names]
    docs = []
    for file in files:
        source = Path(file).read_text(encoding="utf-8")
        assert len(source.splitlines()) >= 300, file
        docs.append(source)
        lines = source.splitlines(keepends=True)
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.end_lineno:
                if node.end_lineno - node.lineno >= 8:
                    docs.append("".join(lines[node.lineno - 1 : node.end_lineno]))
    return docs


def test_real_python_source_is_not_spam_or_garbage() -> None:
    # Identifiers repeat like stuffed keywords (`self`, `arr`, `axis` every few words), lines
    # repeat (`)`, `return result`), and functions of one module share a layout: none of it is
    # spam. Scored together with spam pages, which must still be flagged.
    code = _python_sources()
    assert len(code) >= 100
    doorway = ", ".join(
        ["cheap flights", "cheap flights online", "best cheap flights", "flights cheap",
         "cheap flights deals", "last minute flights"] * 10
    )  # fmt: skip
    soup = " ".join(["buy", "replica", "watches", "replica", "watches", "cheap", "replica"] * 12)
    out = _score(code + [doorway, soup])
    n = len(code)
    flagged = [(r, d[:80]) for d, s, r in zip(code, out["spam_score"], out["spam_reason"],
                                              strict=False) if s >= FLAG_THRESHOLD]  # fmt: skip
    assert not flagged, flagged
    assert (out["garbage_score"][:n] < FLAG_THRESHOLD).all()
    assert (out["spam_score"][n:] >= FLAG_THRESHOLD).all(), out["spam_reason"][n:].to_list()


def test_keyword_reason_names_the_keyword_on_short_pages() -> None:
    # Under 50 words the phrase check is skipped but the (damped) density rule still fires; its
    # reason used to name the keyword as '' because only phrase-checked pages had it looked up.
    rnd = random.Random(2)
    others = ["watches", "sale", "buy", "deals", "cheap", "online", "store", "swiss", "gold"]
    short = " ".join(f"replica {rnd.choice(others)} {rnd.choice(others)}" for _ in range(15))
    assert len(short.split()) < 50
    out = _score([short])
    assert out["spam_score"][0] >= FLAG_THRESHOLD
    reason = out["spam_reason"][0]
    assert "'replica'" in reason and "''" not in reason, reason


def _licences_and_mirrors() -> list[str]:
    """One licence with 14 holders and one page mirrored 14 times: copies, never templates."""
    licence = (
        "Copyright (c) {y} {h}\n\nPermission is hereby granted, free of charge, to any person "
        "obtaining a copy of this software and associated documentation files, to deal in the "
        "Software without restriction, including without limitation the rights to use, copy, "
        "modify, merge, publish, distribute, sublicense, and/or sell copies of the Software."
    )
    licences = [licence.format(y=2000 + i, h=f"Author {chr(65 + i)} Ltd") for i in range(14)]
    head = " ".join(ENGLISH.split()[:50])
    mirrors = [
        f"{head}. Updated {2000 + i}-{i % 12 + 1:02d}-{i % 28 + 1:02d}, {1000 + 37 * i} views, "
        f"build {500 + i}."
        for i in range(14)
    ]
    return licences + mirrors


def test_templates_with_lowercase_slots_are_found() -> None:
    # A farm pastes a lowercase product or service into every sentence; with a different one on
    # almost every page, the pages share their layout but few word sequences, unless the
    # page's own repeated filler word is treated as a slot.
    rnd = random.Random(11)
    services = ["plumbing", "roofing", "landscaping", "towing", "catering", "tutoring",
                "locksmith", "painting", "flooring", "moving", "fencing", "paving"]  # fmt: skip
    cities = ["Austin", "Boston", "Denver", "Fresno", "Irvine", "Madison", "Norfolk", "Ogden"]
    spin = ["affordable", "reliable", "trusted", "local", "fast", "friendly"]
    pages = []
    for i in range(24):
        s, c = services[i % len(services)], rnd.choice(cities)
        pages.append(
            f"{rnd.choice(spin)} {s} in {c} | {s} quotes\n\n"
            f"Need {s} in {c}? Our {s} pros have done {rnd.randint(100, 900)} {s} jobs near {c}. "
            f"We compare {s} prices so you get the best {s} deal. Book {s} online today and "
            f"save {rnd.choice([10, 20, 30])}% on {s}.\n\nWhy our {s}?\n"
            f"- lowest {s} prices in {c}\n- {rnd.choice(spin)} {s} crews on call\n"
            f"- call ({rnd.randint(200, 999)}) 555-{rnd.randint(1000, 9999)} for {s}\n\n"
            f"Related searches: {s} near me, cheap {s} {c}, {s} reviews, {s} cost, best {s}."
        )
    out = _score(pages + _licences_and_mirrors() + list(CLEAN.values()))
    n = len(pages)
    assert (out["spam_score"][:n] >= FLAG_THRESHOLD).all(), out["spam_reason"][:n].to_list()
    assert all("skeleton shared with" in r for r in out["spam_reason"][:n])
    assert (out["spam_score"][n:] < FLAG_THRESHOLD).all()


@pytest.mark.parametrize("workers", [1, 2])
def test_batched_scoring_equals_one_batch(monkeypatch, workers) -> None:
    """Big tables are scored in batches (tokens dropped, skeleton signatures kept); a template
    whose pages fall in different batches is still one cluster, and every score is unchanged."""
    import forensics.score.table as table

    rnd = random.Random(3)
    cities = [f"{a}{b}ville" for a in "BCDFGHJKLM" for b in "aeiou"][:24]
    pages = [
        f"Best {rnd.choice(['plumber', 'roofer'])} deals in {c}: our {c} team quotes first, "
        f"answers around the clock and cleans up after itself. Call {rnd.randint(200, 999)} "
        f"today; neighbours in {c} have trusted our crew since {rnd.randint(1970, 2015)}. "
        "Every technician is licensed, insured and trained on the newest equipment we own."
        for c in cities
    ]
    texts = pages + list(CLEAN.values()) + [None, ""]
    rnd.shuffle(texts)
    whole = _score(texts)
    monkeypatch.setattr(table, "BATCH_ROWS", 7)
    batched = score_table(pl.DataFrame({"text": texts}), workers=workers)
    assert batched.equals(whole)
    assert (whole.filter(pl.col("text").is_in(pages))["spam_score"] >= FLAG_THRESHOLD).all()
