"""A third evaluation set for `forensics score`: reference documentation, in many languages.

Why: reference text (an API or SQL function reference, a manual section, release notes) names
its subject in nearly every sentence, repeats type names in signatures and tables, and is laid
out in headings and definition lists: what the spam rules look for in doorway, stuffed and
boilerplate pages. Neither `tuned` (Python docs, docstrings, gettext catalogues) nor `held-out`
(man pages, info manuals, changelogs) holds much of it. Every source here is pinned by
`eval_sources.SETS["reference"]`, and none of them is read by the other two sets:

- Django 5.1.4's reference (`docs/ref/`: model fields, query sets, database functions, settings,
  `django-admin`) and its release notes (`docs/releases/`), reStructuredText, cut at section
  headings;
- the Debian Reference 2.100 (English, French, German, Spanish, Italian, Portuguese, Indonesian,
  Japanese, simplified and traditional Chinese) and the Debian Administrator's Handbook
  (26 languages; a page is kept for a language only when most of its lines differ from the
  English page, since untranslated chapters are English under another name), HTML turned into
  text and cut at section headings.

The garbage and spam kinds are the other sets' generators (`eval_corpus.py`) applied to this
text, plus the sentence-level corruptions of `eval_partial.py` on long pages.

Split: every source page falls, by a hash of its path and section number, into `look` (a part
to read while working on the rules) or `final` (scored only to report). The split is the same
on every machine and for every seed.
"""

from __future__ import annotations

import hashlib
import random
import re
from html.parser import HTMLParser
from pathlib import Path

import eval_corpus as A
import eval_partial
import eval_sources
import polars as pl

PARTS = ("look", "final")
MIN_CHARS, MAX_CHARS = 600, 20000
# Pages per language and part: enough for a per-language false-positive rate (>= 50 pages),
# not so many that one manual is most of the set.
PER_LANG = 160
ENGLISH = 900


def _part(key: str) -> str:
    """`look` or `final`, from the page's source path and section number alone."""
    return PARTS[hashlib.blake2b(key.encode(), digest_size=2).digest()[0] & 1]


class _Text(HTMLParser):
    """HTML to text: block elements end lines, headings start a new section (marked \\x1e)."""

    BLOCK = {"p", "div", "li", "dt", "dd", "tr", "br", "pre", "table", "ul", "ol", "dl"}
    SKIP = {"script", "style", "head", "title"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in self.SKIP:
            self.skip += 1
        elif tag in ("h1", "h2", "h3"):
            self.out.append("\n\x1e")
        elif tag in self.BLOCK:
            self.out.append("\n")
        elif tag in ("td", "th"):
            self.out.append("  ")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP:
            self.skip = max(0, self.skip - 1)
        elif tag in self.BLOCK or tag in ("h1", "h2", "h3"):
            self.out.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self.out.append(data)


def _html_sections(path: Path) -> list[str]:
    parser = _Text()
    parser.feed(path.read_text(encoding="utf-8"))
    text = "".join(parser.out)
    sections = []
    for part in text.split("\x1e"):
        lines = [" ".join(ln.split()) for ln in part.splitlines()]
        body = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
        sections.append(body)
    return _merge(sections)


_RST_HEADING = re.compile(r"^(.+)\n([=\-~^*#\"'`+])\2{3,}\s*$", re.M)


def _rst_sections(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    cuts = [m.start() for m in _RST_HEADING.finditer(text)] + [len(text)]
    sections = [text[a:b].strip() for a, b in zip([0, *cuts], cuts, strict=False)]
    return _merge(sections)


def _merge(sections: list[str]) -> list[str]:
    """Short sections joined to the next one until a page holds MIN_CHARS; long ones cut at a
    paragraph boundary near MAX_CHARS."""
    out: list[str] = []
    buf = ""
    for s in sections:
        buf = f"{buf}\n\n{s}".strip() if buf else s
        if len(buf) >= MIN_CHARS:
            if len(buf) > MAX_CHARS:
                cut = buf.rfind("\n\n", 0, MAX_CHARS)
                buf = buf[: cut if cut > MIN_CHARS else MAX_CHARS]
            out.append(buf)
            buf = ""
    return out


def _django(root: Path) -> list[tuple[str, str, str]]:
    """(kind, key, text): the reference and the release notes."""
    docs = root / "sdist" / "Django" / "docs"
    out = []
    for kind, folder in (("api_reference", "ref"), ("release_notes", "releases")):
        for f in sorted((docs / folder).rglob("*.txt")):
            rel = f.relative_to(docs).as_posix()
            out += [(kind, f"{rel}#{i}", t) for i, t in enumerate(_rst_sections(f))]
    return out


# Handbook folder and Debian Reference suffix -> the language key the bench groups by.
_LANG = {"ar-MA": "ar", "ca-ES": "ca", "cs-CZ": "cs", "da-DK": "da", "de-DE": "de", "el-GR": "el",
         "es-ES": "es", "fa-IR": "fa", "fr-FR": "fr", "hr-HR": "hr", "id-ID": "id", "it-IT": "it",
         "ja-JP": "ja", "ko-KR": "ko", "nb-NO": "nb", "nl-NL": "nl", "pl-PL": "pl",
         "pt-BR": "pt_BR", "ro-RO": "ro", "ru-RU": "ru", "sv-SE": "sv", "tr-TR": "tr",
         "vi-VN": "vi", "zh-CN": "zh_CN", "zh-TW": "zh_TW", "de": "de", "es": "es", "fr": "fr",
         "id": "id", "it": "it", "ja": "ja", "pt": "pt", "zh-cn": "zh_CN",
         "zh-tw": "zh_TW"}  # fmt: skip


def _translated(page: list[str], english: set[str]) -> bool:
    lines = [ln for ln in page if len(ln) > 20]
    return bool(lines) and sum(ln in english for ln in lines) < 0.5 * len(lines)


def _handbook(root: Path) -> list[tuple[str, str, str]]:
    html = root / "usr" / "share" / "doc" / "debian-handbook" / "html"
    out = []
    for f in sorted((html / "en-US").glob("*.html")):
        en = _html_sections(f)
        out += [("manual", f"handbook/en/{f.name}#{i}", t) for i, t in enumerate(en)]
        en_lines = {ln for t in en for ln in t.splitlines()}
        for folder in sorted(_LANG):
            g = html / folder / f.name
            if "-" not in folder or not g.is_file():
                continue
            for i, t in enumerate(_html_sections(g)):
                if _translated(t.splitlines(), en_lines):
                    out.append((f"clean_{_LANG[folder]}", f"handbook/{folder}/{f.name}#{i}", t))
    return out


def _debian_reference(root: Path) -> list[tuple[str, str, str]]:
    folder = root / "usr" / "share" / "debian-reference"
    out = []
    for f in sorted(folder.glob("*.html")):
        stem, lang = f.name.split(".")[:2]
        if stem == "index":
            continue
        kind = "manual" if lang == "en" else f"clean_{_LANG[lang]}"
        out += [(kind, f"debref/{f.name}#{i}", t) for i, t in enumerate(_html_sections(f))]
    return out


def _all_pages() -> list[tuple[str, str, str]]:
    """(kind, key, text) of every source page, parsed once and cached beside the sources."""
    root = eval_sources.root("reference")
    cache = root / "pages.parquet"
    if cache.is_file():
        return list(pl.read_parquet(cache).iter_rows())
    pages = _django(root) + _handbook(root) + _debian_reference(root)
    frame = pl.DataFrame(pages, schema=["kind", "key", "text"], orient="row")
    frame.write_parquet(cache.with_suffix(".tmp"))
    cache.with_suffix(".tmp").replace(cache)
    return pages


def clean_pages(part: str) -> list[tuple[str, str]]:
    """(kind, text) of one part's clean pages, at most PER_LANG per language (ENGLISH for the
    English kinds), in a fixed order."""
    pages = _all_pages()
    seen: set[str] = set()
    by_kind: dict[str, list[tuple[str, str]]] = {}
    for kind, key, text in pages:
        if _part(key) != part or text in seen or len(text) < MIN_CHARS:
            continue
        seen.add(text)
        by_kind.setdefault(kind, []).append((key, text))
    out: list[tuple[str, str]] = []
    for kind in sorted(by_kind):
        items = sorted(by_kind[kind])
        random.Random(f"{part}/{kind}").shuffle(items)
        cap = ENGLISH // 3 if not kind.startswith("clean_") else PER_LANG
        out += [(kind, text) for _, text in items[:cap]]
    return out


def build(part: str = "look", seed: int = 0, per_kind: int = 80) -> pl.DataFrame:
    """The labelled set of one part: id, text, label, kind, partial (as `eval_corpus.build`)."""
    if part not in PARTS:
        raise ValueError(f"part must be one of {PARTS}, not {part!r}")
    rnd = random.Random(f"{seed}/{part}")
    clean = clean_pages(part)
    rows = [{"text": t, "label": "clean", "kind": k, "partial": False} for k, t in clean]
    eng = [t for k, t in clean if not k.startswith("clean_")]
    multi = [(k.removeprefix("clean_"), t) for k, t in clean if k.startswith("clean_")]
    sources = eng[::2] + [t for _, t in multi][::2]
    rows += A.garbage_docs(sources, per_kind, rnd)
    sents = A._sentences(eng)
    rows += A.template_pages(sents, 6, rnd)
    rows += A.nav_pages(sents, per_kind, rnd)
    rows += A.doorway_pages(sents, per_kind, rnd)
    rows += A.link_farms(sents, per_kind, rnd)
    rows += A.repeated_lines(sents, per_kind, rnd)
    extra = random.Random(f"{seed}/{part}/spans")
    accented = A.latin_accented(eng + [t for lang, t in multi if lang in A.EUROPEAN])
    rows += A.span_docs(eng, accented, per_kind, extra)
    rows += A.doorway_frames(sents, per_kind, extra)
    rows += eval_partial.sentence_docs([t for _, t in clean], per_kind, extra)
    return pl.DataFrame(rows, infer_schema_length=None).with_row_index("id")


if __name__ == "__main__":
    for p in PARTS:
        df = build(p)
        print(p, eval_sources.set_digest(df))
        print(df.group_by("label", "kind").len().sort("label", "kind"))
