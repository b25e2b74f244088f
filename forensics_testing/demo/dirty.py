"""Web pages, clean and dirty, for the demo's crawl batches.

A clean page wraps harvested prose in a page shell (title, body, a short footer), with the odd
correctly encoded typographic character, as real web text has. A dirty crawl batch is one of:

- mojibake: a page whose UTF-8 bytes were decoded as Windows-1252 somewhere in the crawl
  pipeline (the most common encoding accident). Mostly-ASCII English hides it, so typographic
  quotes, dashes, accented names and currency are put in first: after the accident `“` reads
  `â€œ`, `é` reads `Ã©`.
- spam: slot-filled template pages, one skeleton, different product / city / number per page;
  a near-duplicate farm that no single-document rule sees but the batch as a whole shows.
- mixed: half of each.
"""

from __future__ import annotations

import random
import re

import ftfy.bad_codecs  # noqa: F401  (registers "sloppy-windows-1252")

DIRTY_KINDS = ("mojibake", "spam", "mixed")

_TYPOGRAPHY = [
    (re.compile(r'"([^"\n]{1,80})"'), "\u201c\\1\u201d"),
    (re.compile(r"(\w)'(\w)"), "\\1\u2019\\2"),
    (re.compile(r" - "), " \u2014 "),
    (re.compile(r"\.\.\."), "\u2026"),
]
_ACCENTED = [
    "caf\u00e9",
    "na\u00efve",
    "r\u00e9sum\u00e9",
    "Z\u00fcrich",
    "S\u00e3o Paulo",
    "Krak\u00f3w",
    "M\u00e1laga",
    "fa\u00e7ade",
    "\u00fcber",
    "pi\u00f1ata",
    "co\u00f6perate",
    "se\u00f1or",
]
_WORDS = "quick data model fast simple guide notes tips news daily review".split()
_TLDS = ["org", "net", "io", "dev", "info"]


def site_name(rng: random.Random) -> str:
    """A plausible host name for a generated page."""
    return f"{rng.choice(_WORDS)}-{rng.choice(_WORDS)}{rng.randint(1, 99)}.{rng.choice(_TLDS)}"


def typographic(text: str, rng: random.Random, accents: int | None = None) -> str:
    """Curly quotes, dashes and ellipses where ASCII stands in for them, plus accented words
    (by default one per ~30 words, so the whole page carries them, not one corner)."""
    for pattern, repl in _TYPOGRAPHY:
        text = pattern.sub(repl, text)
    words = text.split(" ")
    for _ in range(accents if accents is not None else max(3, len(words) // 30)):
        words.insert(rng.randrange(len(words) + 1), rng.choice(_ACCENTED))
    return " ".join(words) + f" \u2014 \u20ac{rng.randint(5, 90)}, \u00a9 2026"


def web_page(body: str, host: str, rng: random.Random) -> str:
    """A clean page: a title from the first line, the body, a one-line footer."""
    title = body.strip().splitlines()[0][:80].strip("# =-*") or host
    footer = f"{host} \u00b7 {rng.choice(['About', 'Contact', 'Archive', 'Imprint'])}"
    if rng.random() < 0.3:  # some clean pages carry correct typography too
        body = typographic(body, rng, accents=1)
    return f"{title}\n\n{body}\n\n{footer}"


def mojibake(page: str, rng: random.Random) -> str:
    """The page as a crawler that decoded UTF-8 bytes as Windows-1252 stores it."""
    return typographic(page, rng).encode("utf-8").decode("sloppy-windows-1252")


_PRODUCTS = (
    "running shoes|smart watches|leather handbags|gaming laptops|noise cancelling headphones|"
    "air fryers|office chairs|electric scooters|vitamin supplements|car insurance|"
    "payday loans|web hosting|dental implants|solar panels|mattresses"
).split("|")
_CITIES = (
    "Austin|Boston|Denver|Phoenix|Seattle|Dallas|Miami|Portland|Chicago|Atlanta|Houston|"
    "San Diego|Nashville|Tampa|Detroit|Orlando|Columbus|Charlotte|Las Vegas|Sacramento"
).split("|")
_SKELETON = [
    "Best {p} in {c} {y} | Cheap {p} Deals Near You",
    "Looking for the best {p} in {c}? You found it! Our {c} {p} experts compare {n} top rated "
    "{p} so you do not have to. Buy {p} in {c} today and save up to {d}% off.",
    "Why choose our {p} in {c}?",
    "- Lowest {p} prices in {c} guaranteed\n- Free {p} shipping to {c} and nearby\n"
    "- {n}+ happy {p} customers in {c}\n- Call now: ({a}) 555-{m}",
    "Top {k} {p} in {c} for {y}: {p} reviews, {p} coupons, {p} discounts. "
    "Click here for {p} in {c}. Click here for {p} near {c}. Click here for cheap {p}.",
    "Related searches: best {p} {c}, cheap {p} {c}, {p} {c} reviews, {p} near me, "
    "{p} sale {c}, buy {p} online {c}.",
    "Copyright {y} Best {p} {c}. All rights reserved. Privacy | Terms | Sitemap",
]


_SPIN = {  # spintax: each farm page picks one phrasing per slot, as article spinners do
    "best": ["best", "top", "leading", "number one", "most trusted", "finest"],
    "cheap": ["cheap", "affordable", "discount", "low cost", "budget", "bargain"],
    "buy": ["buy", "order", "shop for", "get", "purchase"],
    "today": ["today", "now", "this week", "online", "right away"],
}
_FILLER = [
    "Our {best} {p} team in {c} is ready to help you find {cheap} {p}.",
    "Thousands of people in {c} {buy} {p} from us every month.",
    "Compare {cheap} {p} prices from {n} stores near {c} and save.",
    "We ship {p} to every zip code in {c} {today}, free of charge.",
    "Read {n} verified {p} reviews from customers in {c}.",
    "{best} {p} brands in {c}: compare, {buy} and save up to {d}%.",
    "Looking for {cheap} {p} near {c}? {buy} {today} and get {d}% off.",
]


def spam_page(rng: random.Random) -> str:
    """One page of a template farm: the skeleton with this page's slot values, spun phrasing,
    filler sentences and a slot-filled list of related searches (pages share the skeleton, not
    most of their words)."""
    slots = {
        "p": rng.choice(_PRODUCTS),
        "c": rng.choice(_CITIES),
        "y": rng.choice([2025, 2026]),
        "n": rng.randint(50, 5000),
        "d": rng.choice([10, 20, 30, 40, 50, 70]),
        "a": rng.randint(200, 989),
        "m": f"{rng.randint(0, 9999):04d}",
        "k": rng.choice([5, 7, 10, 15, 20]),
    }
    spun = {key: rng.choice(options) for key, options in _SPIN.items()}
    paras = [line.format(**slots) for line in _SKELETON]
    filler = " ".join(rng.choice(_FILLER).format(**slots, **spun) for _ in range(rng.randint(3, 6)))
    related = ", ".join(
        f"{rng.choice(_SPIN['cheap'])} {rng.choice(_PRODUCTS)} {rng.choice(_CITIES)}"
        for _ in range(rng.randint(4, 8))
    )
    paras.insert(2, filler)
    paras.insert(-1, f"People also search for: {related}.")
    repeat = rng.randint(0, 2)  # farms pad pages with the same block
    return "\n\n".join(paras + paras[1:3] * repeat)


def dirty_page(kind: str, index: int, clean_body: str, rng: random.Random) -> tuple[str, str]:
    """(page, what is wrong with it) for document `index` of a dirty batch of `kind`."""
    if kind not in DIRTY_KINDS:
        raise ValueError(f"dirty kind must be one of {DIRTY_KINDS}, got {kind!r}")
    use_spam = kind == "spam" or (kind == "mixed" and index % 2 == 1)
    if use_spam:
        return spam_page(rng), "spam"
    return mojibake(web_page(clean_body, site_name(rng), rng), rng), "mojibake"
