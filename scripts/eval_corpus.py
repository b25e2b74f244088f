"""Build the labelled `tuned` evaluation set for `forensics score` from pinned packages.

Clean text, all from the files `eval_sources.SETS["tuned"]` pins (the same bytes on every
machine): long descriptions from the pinned wheels' metadata, their *.md/*.rst/*.txt files
(prose only), their Python source (whole modules and single top-level functions or classes, as
code corpora such as The Stack hold them), and real non-English text: the gettext catalogues of
pinned GNU and Debian tools (Chinese, Japanese, Korean, Russian, French, German, Spanish, Polish,
Czech, Vietnamese...) and CPython's cjkencodings test files (checked against their digest).

Every corruption is generated programmatically from clean text, whole-document and partial (one
corrupted paragraph in a ~3,000-character document); every spam kind is built around real
sentences. Labels: `label` in {clean, garbage, spam}; `kind` names the corruption or spam kind;
`partial` marks one-paragraph corruption. The unit tests use different, hand-built documents.
"""

from __future__ import annotations

import email
import gettext
import glob
import random
import re
import sys
import zoneinfo
from pathlib import Path

import eval_partial
import eval_sources
import polars as pl


def _site() -> Path:
    """The pinned wheels, unpacked as a site-packages folder."""
    return eval_sources.root("tuned") / "site-packages"


def _locale() -> Path:
    return eval_sources.root("tuned") / "usr" / "share" / "locale"


LANGS = ("zh_CN", "zh_TW", "ja", "ko", "ru", "uk", "ar", "he", "el", "fr", "de", "es", "pl", "cs",
         "vi", "pt_BR", "tr", "hu")  # fmt: skip
EUROPEAN = ("fr", "de", "es", "pl", "cs", "vi", "pt_BR", "tr", "hu")


def _prose(text: str) -> bool:
    """Keep running text, not word lists, tables of numbers or data files."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(text) < 400 or not lines:
        return False
    words = re.findall(r"[^\W\d_]{2,}", text)
    return len(words) / max(len(lines), 1) >= 3 and len(words) >= 60


def english_docs(limit: int = 1500) -> list[str]:
    """Package descriptions and documentation files (mostly English technical prose)."""
    docs: list[str] = []
    seen: set[str] = set()
    for meta in sorted(_site().glob("*.dist-info/METADATA")):
        # Core metadata is UTF-8. `email.message_from_bytes` reads bytes as ASCII and its
        # payload turns every non-ASCII byte into U+FFFD: a lossy decode, i.e. corrupted text.
        msg = email.message_from_string(meta.read_text(encoding="utf-8"))
        body = str(msg.get_payload() or msg.get("Description") or "")
        if _prose(body) and body not in seen:
            seen.add(body)
            docs.append(body[:20000])
    files: list[str] = []
    for ext in ("md", "rst", "txt"):
        files += glob.glob(str(_site() / "**" / f"*.{ext}"), recursive=True)
    for f in sorted(files):
        try:
            body = Path(f).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if _prose(body) and body not in seen:
            seen.add(body)
            docs.append(body[:20000])
    docs += docstring_docs(seen, max(0, limit - len(docs)))
    random.Random(0).shuffle(docs)
    return docs[:limit]


def docstring_docs(seen: set[str], limit: int) -> list[str]:
    """Long module and class docstrings from installed packages (real technical English)."""
    import ast

    files = sorted(glob.glob(str(_site() / "**" / "*.py"), recursive=True))
    random.Random(2).shuffle(files)
    out: list[str] = []
    for f in files:
        if len(out) >= limit:
            break
        try:
            tree = ast.parse(Path(f).read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
            continue
        nodes = [tree] + [n for n in tree.body if isinstance(n, ast.ClassDef)]
        for node in nodes:
            doc = ast.get_docstring(node)
            if doc and _prose(doc) and doc not in seen:
                seen.add(doc)
                out.append(doc)
    return out


def code_docs(limit: int = 400, seed: int = 3) -> list[str]:
    """Real Python source: half whole modules (cut at a line boundary near 20,000 characters),
    half single top-level functions or classes of at least 15 lines, from different packages."""
    import ast

    files = sorted(glob.glob(str(_site() / "**" / "*.py"), recursive=True))
    rnd = random.Random(seed)
    rnd.shuffle(files)
    modules: list[str] = []
    segments: list[str] = []
    per_package: dict[str, int] = {}
    for f in files:
        if len(modules) >= limit // 2 and len(segments) >= limit - limit // 2:
            break
        package = Path(f).relative_to(_site()).parts[0]
        if per_package.get(package, 0) >= 12:
            continue  # many packages, not a thousand files of one
        try:
            source = Path(f).read_text(encoding="utf-8")
            tree = ast.parse(source)
        except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
            continue
        lines = source.splitlines(keepends=True)
        if len(lines) >= 40 and len(modules) < limit // 2:
            cut, size = [], 0
            for line in lines:
                if size + len(line) > 20000:
                    break
                cut.append(line)
                size += len(line)
            modules.append("".join(cut))
            per_package[package] = per_package.get(package, 0) + 1
        defs = [
            n
            for n in tree.body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and n.end_lineno is not None
            and n.end_lineno - n.lineno >= 15
        ]
        if defs and len(segments) < limit - limit // 2:
            node = rnd.choice(defs)
            start = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            segments.append("".join(lines[start - 1 : node.end_lineno])[:20000])
            per_package[package] = per_package.get(package, 0) + 1
    return modules + segments


def _catalogue_messages(lang: str) -> list[str]:
    messages: list[str] = []
    for mo in sorted((_locale() / lang / "LC_MESSAGES").glob("*.mo")):
        if mo.name.startswith("iso_"):
            continue  # lists of country and language names, not prose
        try:
            with mo.open("rb") as fh:
                catalog = gettext.GNUTranslations(fh)._catalog  # noqa: SLF001
        except Exception:  # noqa: BLE001 - a broken catalogue is simply skipped
            continue
        for key, value in catalog.items():
            if not key or not isinstance(value, str) or len(value) < 25:
                continue
            messages.append(value.strip())
    return messages


def multilingual_docs(per_lang: int = 40) -> list[tuple[str, str]]:
    """(lang, document) pairs: translated messages joined into ~1-3 KB documents."""
    rnd = random.Random(1)
    out: list[tuple[str, str]] = []
    for lang in LANGS:
        msgs = _catalogue_messages(lang)
        rnd.shuffle(msgs)
        i = 0
        for _ in range(per_lang):
            target = rnd.randint(800, 3000)
            doc: list[str] = []
            while i < len(msgs) and sum(map(len, doc)) < target:
                doc.append(msgs[i])
                i += 1
            if len(doc) >= 3:
                out.append((lang, "\n\n".join(doc) if rnd.random() < 0.5 else "\n".join(doc)))
    for f in eval_sources.cjk_tests():
        text = f.read_text(encoding="utf-8")
        if len(text) > 150:
            out.append((f.name.split("-")[0], text))
    return out


# ---------------------------------------------------------------- corruptions


def _paragraphs(text: str) -> list[str]:
    return [p for p in re.split(r"\n\s*\n", text) if p.strip()]


def cp1252(s: str, rnd: random.Random) -> str:
    return s.encode("utf-8").decode(rnd.choice(["cp1252", "latin-1"]), errors="replace")


def double(s: str, rnd: random.Random) -> str:
    once = s.encode("utf-8").decode("cp1252", errors="replace")
    return once.encode("utf-8").decode("cp1252", errors="replace")


def _legacy(codec: str):
    def f(s: str, rnd: random.Random) -> str:
        return s.encode("utf-8").decode(codec, errors="replace")

    f.__name__ = codec
    return f


def utf16(s: str, rnd: random.Random) -> str:
    raw = s.encode(rnd.choice(["utf-16-le", "utf-16-be"]))
    return raw.decode(rnd.choice(["utf-8", "latin-1"]), errors="replace")


def controls(s: str, rnd: random.Random) -> str:
    chars = list(s)
    density = rnd.uniform(0.03, 0.2)
    pool = [chr(c) for c in range(32) if c not in (9, 10, 13)] + ["\x7f", "\x00", "\x00"]
    for _ in range(max(4, int(len(chars) * density))):
        chars.insert(rnd.randrange(len(chars) + 1), rnd.choice(pool))
    return "".join(chars)


def replacement(s: str, rnd: random.Random) -> str:
    # What an ASCII/strict decoder with errors="replace" leaves, plus lost-byte runs.
    out = s.encode("utf-8").decode("ascii", errors="replace")
    chars = list(out)
    for _ in range(rnd.randint(2, 6)):
        pos = rnd.randrange(len(chars) + 1)
        chars[pos:pos] = ["\ufffd"] * rnd.randint(1, 6)
    return "".join(chars)


def private_use(s: str, rnd: random.Random) -> str:
    chars = list(s)
    density = rnd.uniform(0.05, 0.3)
    for _ in range(max(4, int(len(chars) * density))):
        i = rnd.randrange(len(chars))
        r = rnd.random()
        if r < 0.6:
            chars[i] = chr(rnd.randint(0xE000, 0xF8FF))
        elif r < 0.8:
            chars[i] = chr(rnd.randint(0xF0000, 0xFFFFD))
        else:
            chars[i] = chr(rnd.choice([0x0378, 0x0380, 0x05FF, 0x2FFF, 0xFFFE, 0xE0080, 0x1FFFE]))
    return "".join(chars)


def binary(s: str, rnd: random.Random) -> str:
    raw = bytes(rnd.randrange(256) for _ in range(max(200, len(s))))
    return raw.decode(rnd.choice(["latin-1", "utf-8", "cp1252"]), errors="replace")


GARBAGE_KINDS = {
    "utf8_as_cp1252": cp1252,
    "double_encoding": double,
    "utf8_as_gbk": _legacy("gbk"),
    "utf8_as_shift_jis": _legacy("shift_jis"),
    "utf8_as_big5": _legacy("big5"),
    "utf8_as_euc_kr": _legacy("euc_kr"),
    "utf16": utf16,
    "c0_controls": controls,
    "replacement_chars": replacement,
    "private_use": private_use,
    "binary": binary,
}
# Kinds that only change non-ASCII text: their source must contain some.
NEEDS_NON_ASCII = {"utf8_as_cp1252", "double_encoding", "utf8_as_gbk", "utf8_as_shift_jis",
                   "utf8_as_big5", "utf8_as_euc_kr", "replacement_chars"}  # fmt: skip


def _non_ascii(s: str) -> int:
    return len(s) - len(s.encode("ascii", "ignore"))


def _target_paragraph(kind: str, pool: list[str], rnd: random.Random) -> str:
    """A 150-700 character paragraph that the corruption actually changes."""
    while True:
        cands = [p for p in _paragraphs(rnd.choice(pool)) if 150 <= len(p) <= 700]
        if kind in NEEDS_NON_ASCII:
            cands = [p for p in cands if _non_ascii(p) >= 3]
        if cands:
            return rnd.choice(cands)


def garbage_docs(sources: list[str], per_kind: int, rnd: random.Random) -> list[dict]:
    """Whole and partial corruptions of each kind (half each)."""
    rich = [s for s in sources if _non_ascii(s) >= 8]
    out: list[dict] = []
    for kind, fn in GARBAGE_KINDS.items():
        pool = rich if kind in NEEDS_NON_ASCII else sources
        for k in range(per_kind):
            partial = k % 2 == 1
            src = rnd.choice(pool)
            if not partial:
                text = src[: rnd.randint(600, 4000)]
                bad = fn(text, rnd)
            else:
                # ~3,000 characters of clean text with one corrupted paragraph inside.
                paras = _paragraphs(" \n\n".join(rnd.sample(sources, 4)))
                body = []
                while paras and sum(map(len, body)) < 2700:
                    body.append(paras.pop(0)[:700])
                target = _target_paragraph(kind, pool, rnd)
                body.insert(rnd.randrange(len(body) + 1), fn(target, rnd))
                bad = "\n\n".join(body)
            out.append({"text": bad, "label": "garbage", "kind": kind, "partial": partial})
    return out


# ------------------------------------------------- the held-out kinds ---------
# Corruptions that touch only a few characters of a long document: what the whole-document
# kinds above do not exercise. Each keeps the rest of the document clean.

_LETTER_PAIR = re.compile(r"(?<=[^\W\d_])(?=[^\W\d_])")
_SPARSE_POOL = (
    [chr(c) for c in range(1, 32) if c not in (9, 10, 13)]
    + ["\x7f"]
    + [chr(c) for c in range(0x80, 0xA0)]
)


def sparse_controls(s: str, rnd: random.Random) -> str:
    """A handful (3-8) of C0/C1 control characters, each inside a word (a broken pipeline)."""
    spots = [m.start() for m in _LETTER_PAIR.finditer(s)]
    for p in sorted(rnd.sample(spots, min(len(spots), rnd.randint(3, 8))), reverse=True):
        s = s[:p] + rnd.choice(_SPARSE_POOL) + s[p:]
    return s


_ACCENTED_WORD = re.compile(r"[A-Za-z\u00c0-\u024f]*[\u00c0-\u024f][A-Za-z\u00c0-\u024f]*")


def _span(codec: str):
    """UTF-8 read as `codec` in one span only: one accented word, or up to ~40 characters."""

    def f(s: str, rnd: random.Random) -> str:
        words = [m for m in _ACCENTED_WORD.finditer(s) if len(m.group(0)) >= 3]
        if not words:
            return s
        m = rnd.choice(words)
        start, end = m.start(), m.end()
        if rnd.random() < 0.4:
            end = min(len(s), end + rnd.randint(5, 30))
        bad = s[start:end].encode("utf-8").decode(codec, errors="replace")
        return s[:start] + bad + s[end:]

    f.__name__ = f"{codec}_span"
    return f


SPAN_KINDS = {
    "sparse_controls": sparse_controls,
    "gbk_span": _span("gbk"),
    "cp1252_span": _span("cp1252"),
}


def latin_accented(docs: list[str]) -> list[str]:
    """Mostly-Latin documents with at least one accented word (names, French, Spanish...)."""
    out = []
    for d in docs:
        if _non_ascii(d) == 0 or re.search(r"[\u0370-\u1fff\u3000-\uffff]", d):
            continue
        if any(len(m.group(0)) >= 3 for m in _ACCENTED_WORD.finditer(d)):
            out.append(d)
    return out


def span_docs(
    plain: list[str], accented: list[str], per_kind: int, rnd: random.Random
) -> list[dict]:
    """The held-out garbage kinds on 600-5,000 character documents (whole documents only: the
    corruption is already confined to a few characters)."""
    out: list[dict] = []
    for kind, fn in SPAN_KINDS.items():
        pool = plain if kind == "sparse_controls" else accented
        for _ in range(per_kind):
            src = rnd.choice(pool)
            text = src[: rnd.randint(600, 5000)]
            bad = fn(text, rnd)
            if bad == text:
                bad = fn(src, rnd)
            if bad != text and bad != src:
                out.append({"text": bad, "label": "garbage", "kind": kind, "partial": False})
    return out


PRODUCTS = ["running shoes", "cheap flights", "payday loans", "weight loss pills", "vpn service",
            "car insurance", "web hosting", "online casino", "diet supplements", "seo services",
            "wedding dresses", "bitcoin wallet", "dental implants", "hair extensions", "used cars",
            "garage doors", "roof repair", "essay writing", "dog food", "led lights"]  # fmt: skip


def doorway_frames(sents: list[str], n: int, rnd: random.Random) -> list[dict]:
    """Doorway pages: real prose with one product keyword forced into every sentence.

    Unlike `doorway_pages` (a list of short keyword phrases), each sentence is a real one from a
    different context, with the keyword inserted at a random word position.
    """
    out = []
    for _ in range(n):
        kw = rnd.choice(PRODUCTS)
        if rnd.random() < 0.3:
            kw = f"{rnd.choice(['best', 'cheap', 'buy', 'top'])} {kw}"
        body = []
        for s in rnd.sample(sents, rnd.randint(8, 25)):
            words = s.split()
            words.insert(rnd.randrange(1, len(words)), kw)
            body.append(" ".join(words))
        title = rnd.choice([kw.title(), f"{kw.title()} - Official Site", f"Best {kw}"])
        sep = rnd.choice([" ", "\n", "\n\n"])
        text = title + "\n\n" + sep.join(body)
        out.append({"text": text, "label": "spam", "kind": "doorway_frames", "partial": False})
    return out


# ---------------------------------------------------------------- spam


def _sentences(docs: list[str]) -> list[str]:
    sents = []
    for d in docs:
        for s in re.split(r"(?<=[.!?])\s+", d):
            s = " ".join(s.split())
            if 40 <= len(s) <= 220 and re.match(r"^[A-Z][a-z]", s) and "http" not in s:
                sents.append(s)
    return sents


def _cities() -> list[str]:
    return sorted(
        {z.split("/")[-1].replace("_", " ") for z in zoneinfo.available_timezones() if "/" in z}
    )


def template_pages(sents: list[str], n_templates: int, rnd: random.Random) -> list[dict]:
    """Slot-filled SEO pages: real sentences with {place}/{thing}/{number} slots."""
    cities = _cities()
    things = sorted({w.lower() for s in sents for w in re.findall(r"\b[a-z]{5,12}\b", s)})
    out = []
    for _ in range(n_templates):
        body = rnd.sample(sents, rnd.randint(4, 9))
        slots = []
        for s in body:
            words = s.split()
            for _ in range(rnd.randint(1, 3)):
                words.insert(
                    rnd.randrange(1, len(words)), rnd.choice(["{place}", "{thing}", "{n}"])
                )
            slots.append(" ".join(words))
        title = rnd.choice(
            [
                "Best {thing} in {place}",
                "{thing} services {place}",
                "Top {n} {thing} deals in {place}",
            ]
        )
        template = title + "\n\n" + " ".join(slots)
        thing_pool = rnd.sample(things, 8)
        for _ in range(rnd.randint(15, 60)):
            page = template.replace("{place}", "\x00P").replace("{thing}", "\x00T")
            place, thing = rnd.choice(cities), rnd.choice(thing_pool)
            page = page.replace("\x00P", place).replace("\x00T", thing)
            page = re.sub(r"\{n\}", lambda _: str(rnd.randint(2, 999)), page)
            out.append({"text": page, "label": "spam", "kind": "template", "partial": False})
    return out


MENU = [
    "Home",
    "About",
    "About Us",
    "Contact",
    "Contact Us",
    "Blog",
    "Shop",
    "Services",
    "FAQ",
    "Careers",
    "News",
    "Products",
    "Pricing",
    "Support",
    "Login",
    "Sign in",
    "Register",
    "Cart",
]
FOOTER = ["Privacy Policy", "Terms of Use", "Terms of Service", "Cookie Settings", "Sitemap",
          "All rights reserved.", "Follow us", "Facebook", "Twitter", "Instagram", "LinkedIn",
          "YouTube", "Subscribe to our newsletter", "Back to top",
          "Skip to main content"]  # fmt: skip


def nav_pages(sents: list[str], n: int, rnd: random.Random) -> list[dict]:
    out = []
    for _ in range(n):
        sep = rnd.choice([" | ", " · ", " » ", "\n"])
        lines = [sep.join(rnd.sample(MENU, rnd.randint(4, 8)))]
        if rnd.random() < 0.5:
            lines += rnd.sample(MENU, rnd.randint(3, 6))
        lines.append(" ".join(rnd.sample(sents, rnd.randint(1, 2))))
        lines += rnd.sample(FOOTER, rnd.randint(6, 12))
        lines.append(
            f"© {rnd.randint(2005, 2025)} {rnd.choice(_cities())} Media. All rights reserved."
        )
        out.append(
            {"text": "\n".join(lines), "label": "spam", "kind": "nav_boilerplate", "partial": False}
        )
    return out


def doorway_pages(sents: list[str], n: int, rnd: random.Random) -> list[dict]:
    words = sorted({w.lower() for s in sents for w in re.findall(r"\b[a-z]{4,10}\b", s)})
    out = []
    for _ in range(n):
        kw = " ".join(rnd.sample(words, rnd.randint(1, 3)))
        mods = [
            "cheap",
            "best",
            "buy",
            "online",
            "discount",
            "free",
            "top",
            "near me",
            "2024",
            "sale",
        ]
        parts = []
        for _ in range(rnd.randint(15, 40)):
            r = rnd.random()
            if r < 0.5:
                parts.append(
                    f"{rnd.choice(mods)} {kw}" if rnd.random() < 0.5 else f"{kw} {rnd.choice(mods)}"
                )
            elif r < 0.75:
                parts.append(kw)
            else:
                parts.append(rnd.choice(sents))
        sep = rnd.choice([", ", ". ", " ", "\n"])
        out.append(
            {"text": sep.join(parts), "label": "spam", "kind": "keyword_stuffing", "partial": False}
        )
    return out


def link_farms(sents: list[str], n: int, rnd: random.Random) -> list[dict]:
    words = sorted({w.lower() for s in sents for w in re.findall(r"\b[a-z]{4,10}\b", s)})
    out = []
    for _ in range(n):
        lines = []
        if rnd.random() < 0.5:
            lines.append(rnd.choice(sents))
        for _ in range(rnd.randint(20, 80)):
            tld = rnd.choice(["com", "net", "info", "biz", "org"])
            dom = f"{rnd.choice(words)}-{rnd.choice(words)}.{tld}"
            url = f"https://{rnd.choice(['', 'www.'])}{dom}/{rnd.choice(words)}"
            style = rnd.random()
            if style < 0.4:
                lines.append(url)
            elif style < 0.7:
                lines.append(f"{rnd.choice(words).title()} {rnd.choice(words)} - {url}")
            else:
                lines.append(f"* [{rnd.choice(words)} {rnd.choice(words)}]({url})")
        out.append(
            {"text": "\n".join(lines), "label": "spam", "kind": "link_farm", "partial": False}
        )
    return out


def repeated_lines(sents: list[str], n: int, rnd: random.Random) -> list[dict]:
    out = []
    for _ in range(n):
        block = rnd.sample(sents, rnd.randint(1, 5))
        lines = [rnd.choice(sents)] if rnd.random() < 0.5 else []
        for _ in range(rnd.randint(6, 30)):
            lines += block
        out.append(
            {"text": "\n".join(lines), "label": "spam", "kind": "repeated_lines", "partial": False}
        )
    return out


def build(
    seed: int = 0, per_kind: int = 80, english_limit: int = 900, code_limit: int = 400
) -> pl.DataFrame:
    """The labelled set: text, label, kind, partial, lang."""
    rnd = random.Random(seed)
    eng = english_docs(english_limit)
    multi = multilingual_docs()
    rows = [{"text": d, "label": "clean", "kind": "english", "partial": False} for d in eng]
    # Source code is clean pretraining text too (its own random stream: the other kinds stay
    # the documents they were before code joined the set).
    rows += [
        {"text": d, "label": "clean", "kind": "code", "partial": False}
        for d in code_docs(code_limit, seed + 3)
    ]
    rows += [
        {"text": d, "label": "clean", "kind": f"clean_{lang}", "partial": False}
        for lang, d in multi
    ]
    sources = eng[: len(eng) // 2] + [d for _, d in multi]
    rows += garbage_docs(sources, per_kind, rnd)
    sents = _sentences(eng)
    rows += template_pages(sents, 6, rnd)
    rows += nav_pages(sents, per_kind, rnd)
    rows += doorway_pages(sents, per_kind, rnd)
    rows += link_farms(sents, per_kind, rnd)
    rows += repeated_lines(sents, per_kind, rnd)
    # The held-out kinds draw from their own stream: the documents above stay as they were.
    extra = random.Random(seed + 15)
    accented = latin_accented(eng + [d for lang, d in multi if lang in EUROPEAN])
    rows += span_docs(eng, accented, per_kind, extra)
    rows += doorway_frames(sents, per_kind, extra)
    # One to three damaged sentences in a long clean page (their own stream, as above).
    rows += eval_partial.sentence_docs(
        eng + [d for _, d in multi], per_kind, random.Random(seed + 25)
    )
    return pl.DataFrame(rows, infer_schema_length=None).with_row_index("id")


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "eval_set.parquet"
    df = build()
    df.write_parquet(out)
    print(df.group_by("label", "kind").len().sort("label", "kind"))
