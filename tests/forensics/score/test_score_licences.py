"""Licence and copyright notices are clean; the spam they look like is still flagged.

The clean side is the licence files the installed packages ship in their `.dist-info` folders
(written by the packages' own authors, found with `importlib.metadata`): before `licence.py`,
28 of the 246 in this project's environment scored as spam, either as a skeleton shared with
other MIT texts (other holders and years) or by duplicated lines (sympy's and pyarrow's files
restate the BSD licence once per bundled project). The spam side is the same repeated-lines
and template pages that carry a footer a notice also has ("© 2024 ... All rights reserved").
"""

from __future__ import annotations

import random
from importlib import metadata

import polars as pl

from forensics.score import FLAG_THRESHOLD, score_table
from forensics.score.licence import is_licence


def _licence_files() -> list[str]:
    texts = []
    for dist in metadata.distributions():
        for f in dist.files or []:
            name = f.name.upper()
            if ".dist-info" in str(f) and name.startswith(("LICENSE", "LICENCE", "COPYING")):
                try:
                    texts.append(f.read_text(encoding="utf-8"))
                except (OSError, UnicodeDecodeError):
                    continue
    return sorted(set(texts))


def _score(texts: list[str]) -> pl.DataFrame:
    return score_table(pl.DataFrame({"text": texts}, schema={"text": pl.Utf8}), keys=True)


def test_installed_packages_licence_files_are_clean() -> None:
    texts = _licence_files()
    assert len(texts) >= 30, len(texts)  # enough MIT/BSD copies to form skeleton clusters
    out = _score(texts)
    flagged = out.filter(pl.col("spam_score") >= FLAG_THRESHOLD)
    assert flagged.height == 0, flagged.select("spam_rule", "spam_reason").rows()[:5]


def test_footers_are_not_notices_and_their_spam_is_flagged() -> None:
    footer = "\n© 2024 Soapworks Media. All rights reserved. Privacy Policy"
    repeated = (
        "\n".join(["Click here to claim your reward now.", "Offer ends tonight!"] * 25) + footer
    )
    rnd = random.Random(3)
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
        + footer
        for c in cities
    ]
    texts = [repeated, *pages]
    assert not is_licence(pl.Series(texts), list(range(len(texts)))).any()
    out = _score(texts)
    assert (out["spam_score"] >= FLAG_THRESHOLD).all(), out
    assert out["spam_rule"][0] == "dup_line_chars"
    assert all("skeleton" in r for r in out["spam_rule"][1:])


def test_a_notice_needs_a_licence_grant_with_a_copyright_or_at_its_start() -> None:
    grant = "Permission is hereby granted, free of charge, to any person obtaining a copy."
    prose = "The scheduler assigns each job to the least loaded worker. " * 8
    texts = pl.Series(
        [f"Copyright (C) 1989-95 GROUPE BULL\n\n{prose}{grant}", grant, prose + grant,
         "Copyright 2001 Soapworks. All rights reserved."]
    )  # fmt: skip
    assert is_licence(texts, [0, 1, 2, 3]).tolist() == [True, True, False, False]
