"""Short template spam (one skeleton across many pages of 50-200 characters) vs short generated
reference stubs that share a skeleton too.

Spam: slot-filled city/service stubs, 60-110 characters, three templates of 40 pages each. (A
stub that repeats its lowercase slot, "cheap roofer ... our roofer team", splits into one
skeleton per slot value: too few pages each at this size; see docs/scoring.md.)
Clean look-alike: the example lines that scipy's docstring template writes into every
continuous distribution's documentation (`scipy.stats`, the installed library's own text),
one skeleton with the distribution's name and shape parameters as slots, laid out as code (the
short ones: longer example lines are judged by the long-page rule).
"""

from __future__ import annotations

import inspect
import random

import polars as pl

from forensics.score import FLAG_THRESHOLD, score_table
from forensics.score.skeleton import SHORT_MIN_CLUSTER, Signatures
from forensics.score.tokens import tokenize

CITIES = ["Austin", "Boston", "Denver", "Fresno", "Irvine", "Madison", "Norfolk", "Ogden",
          "Provo", "Quincy", "Reno", "Salem", "Tulsa", "Utica", "Waco", "Yuma", "Akron",
          "Boise", "Camden", "Dover", "Elgin", "Flint", "Gary", "Helena", "Joliet", "Kent",
          "Laredo", "Mesa", "Naples", "Orem", "Pueblo", "Racine", "Sparks", "Tempe", "Vail",
          "Wayne", "Xenia", "York", "Zion", "Aurora"]  # fmt: skip
TEMPLATES = [
    "Best {s} in {c}. Call {p} today for a free quote!",
    "Looking for a cheap {s} near {c}? Our team is open all week. Call {p}.",
    "{c} {s}, fast, local and licensed. Book online or call {p} now.",
]


def _short_spam() -> list[str]:
    rnd = random.Random(4)
    return [
        t.format(
            s=rnd.choice(["plumber", "roofer", "locksmith"]),
            c=c,
            p=f"{rnd.randint(200, 999)}-555-{rnd.randint(1000, 9999)}",
        )
        for t in TEMPLATES
        for c in CITIES
    ]


def _scipy_examples() -> list[str]:
    from scipy import stats

    out = []
    for name in dir(stats):
        dist = getattr(stats, name)
        if isinstance(dist, stats.rv_continuous):
            for para in (inspect.getdoc(dist) or "").split("\n\n"):
                text = " ".join(para.split())
                if 50 <= len(text) <= 200 and "linspace" in text:
                    out.append(text)
    return sorted(set(out))


def _score(texts: list[str]) -> pl.DataFrame:
    return score_table(pl.DataFrame({"text": texts}, schema={"text": pl.Utf8}), keys=True)


def test_short_template_pages_are_found_through_their_skeleton() -> None:
    pages = _short_spam()
    assert max(map(len, pages)) <= 200
    out = _score(pages)
    flagged = (out["spam_score"] >= FLAG_THRESHOLD).sum()
    assert flagged >= 0.9 * len(pages), flagged
    assert all("skeleton" in r for r in out.filter(pl.col("spam_score") >= 0.5)["spam_rule"])


def test_short_generated_reference_stubs_are_not_templates() -> None:
    examples = pl.Series(_scipy_examples())
    short = Signatures.of(tokenize(examples)).short
    assert short.sum() >= SHORT_MIN_CLUSTER, short.sum()  # a cluster above the short minimum
    out = _score(examples.to_list()).filter(pl.Series(short))
    assert (out["spam_score"] < FLAG_THRESHOLD).all(), out.filter(pl.col("spam_score") >= 0.5)
