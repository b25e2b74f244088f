"""Pages that share a block (one package's man-page footer) are not a template; a template farm
scored beside them still is.

Clean side: `coreutils_fi_pages.json`, eleven coreutils man pages of Debian's `manpages-fi`
4.18.1-1 (tty, pwd, sleep, whoami, nohup, false, dirname, users, printenv, nice, arch), as the
held-out evaluation set renders them. Their bodies are a few lines each and differ; the footer
(`--help`/`--version`, reporting bugs, copyright, see also, translators) is the same text with
the command and people's names changed, so every pair's skeletons meet at about half their
shingles and the eleven form one connected cluster. Spam side: slot-filled pages that fill the
whole of one skeleton, and the demo's spun farm (`forensics_testing.demo.dirty.spam_page`:
spun phrasing and filler sentences, so its pages link at a skeleton Jaccard of about 0.58, no
higher than the man pages' links).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import polars as pl

from forensics.score import FLAG_THRESHOLD, score_table, skeleton
from forensics.score.skeleton import MIN_CLUSTER, Signatures, cluster_signatures
from forensics.score.tokens import tokenize

PAGES = json.loads((Path(__file__).parent / "coreutils_fi_pages.json").read_text("utf-8"))
TEMPLATE = (
    "Need a reliable {s} in {c}? Our {c} {s} crew has served local families since {y}. "
    "We answer calls around the clock, quote prices before we start, and clean up after "
    "ourselves. Ask your neighbours in {c} about us, or call {p} for a visit this week. "
    "Every {s} on our team is licensed, insured and trained on the newest equipment."
)
CITIES = ["Austin", "Boston", "Denver", "Fresno", "Irvine", "Madison", "Norfolk", "Ogden",
          "Provo", "Quincy", "Reno", "Salem", "Tulsa", "Utica", "Waco", "Yuma"]  # fmt: skip


def _farm() -> list[str]:
    rnd = random.Random(7)
    return [
        TEMPLATE.format(
            s=rnd.choice(["plumber", "roofer", "locksmith"]),
            c=c,
            y=rnd.randint(1970, 2015),
            p=f"{rnd.randint(200, 999)}-555-{rnd.randint(1000, 9999)}",
        )
        for c in CITIES
    ]


def _spun_farm() -> list[str]:
    from forensics_testing.demo.dirty import spam_page

    rnd = random.Random(3)
    return [spam_page(rnd) for _ in range(30)]


def test_man_pages_sharing_a_footer_are_not_a_template(monkeypatch) -> None:
    texts = pl.Series(PAGES)
    sigs = Signatures.of(tokenize(texts))
    # The pages are linked into one cluster of template size before the median-link check...
    with monkeypatch.context() as m:
        m.setattr(skeleton, "_drop_shared_blocks", lambda labels, *_: labels)
        linked = cluster_signatures(sigs, texts.hash().to_numpy())
    assert linked.size.max() >= MIN_CLUSTER, linked.size
    # ...and are no template after it.
    clusters = cluster_signatures(sigs, texts.hash().to_numpy())
    assert clusters.size.max() == 0, clusters.size
    farm, spun = _farm(), _spun_farm()
    out = score_table(pl.DataFrame({"text": PAGES + farm + spun}))
    flagged = (out["spam_score"] >= FLAG_THRESHOLD).to_list()
    n, m = len(PAGES), len(PAGES) + len(farm)
    assert not any(flagged[:n]), out["spam_reason"][:n].to_list()
    assert all(flagged[n:m]) and all("skeleton shared with" in r for r in out["spam_reason"][n:m])
    # One spun page of the thirty links to none of the others (as before the median-link check).
    assert sum(flagged[m:]) >= len(spun) - 1, out["spam_score"][m:].to_list()
