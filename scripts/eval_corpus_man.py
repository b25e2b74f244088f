"""A second, independent evaluation set for `forensics score`: manuals instead of Python docs.

All of it comes from the Debian packages `eval_sources.SETS["held-out"]` pins (man pages, info
manuals and changelogs of GNU and Debian tools, the `manpages-*` translations), each checked
against its hash, so the set is the same on every machine.

Why: the thresholds of the scorers were chosen while looking at `eval_corpus.py`'s set (package
descriptions, docstrings, Python source, gettext catalogues). This set is built from a different
kind of text on the same machine, so a score reported on it says how the rules hold on text they
were never tuned on:

- clean English: man pages (sections 1, 5, 7, 8: commands, files and option lists; section 3:
  C library and Perl module function references) rendered by groff, GNU info manuals split into
  nodes, and Debian changelogs (`/usr/share/doc/*/changelog*.gz`: lines like "Removed ...",
  "New upstream release", maintainer names with accents);
- clean non-English: the translated man pages under /usr/share/man/<lang>/ (French, German,
  Spanish, Japanese, Chinese, Korean, Russian, Polish, ...), with the Debian packages'
  `manpages-*` translations where installed;
- garbage and spam made from that text with the generators of `eval_corpus.py` (every kind,
  including the held-out ones: sparse controls inside words, one-span GBK and cp1252 mojibake,
  doorway pages with a keyword forced into every sentence).

Rendered manuals are cached (Parquet under $XDG_CACHE_HOME/forensics, keyed by the list of
source files), so only the first build runs groff (about 30 s on 2 cores).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import random
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import eval_corpus as A
import eval_partial
import eval_sources
import polars as pl


def _share() -> Path:
    """The pinned packages' /usr/share, unpacked."""
    return eval_sources.root("held-out") / "usr" / "share"


MAX_CHARS = 20000
# Translated manuals: every language directory with at least a few pages.
MIN_PAGES_PER_LANG = 8


# Pages per family (the name before the first `_`, `-` or `.`): one generator's pages (e.g.
# thousands of `gcloud_*` pages of one cloud SDK) must not be most of the set.
PER_FAMILY = 5


def _sample(paths: list[Path], k: int, rnd: random.Random) -> list[Path]:
    paths = sorted(paths)
    rnd.shuffle(paths)
    out: list[Path] = []
    seen: dict[str, int] = {}
    for p in paths:
        family = re.split(r"[_.-]", p.name.lower(), maxsplit=1)[0]
        if seen.get(family, 0) < PER_FAMILY:
            seen[family] = seen.get(family, 0) + 1
            out.append(p)
        if len(out) >= k:
            break
    return out


def _render(path: Path) -> str:
    """groff's plain-text rendering of one man page ("" when it fails)."""
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        if raw.lstrip().startswith(b".so "):
            return ""  # a link to another page
        out = subprocess.run(
            ["groff", "-k", "-man", "-Tutf8", "-P-cbou", "-rHY=0", "-rLL=100n"],
            input=raw,
            capture_output=True,
            timeout=60,
            check=False,
        )
        text = out.stdout.decode("utf-8", errors="strict")
    except (OSError, UnicodeDecodeError, subprocess.TimeoutExpired):
        return ""
    # Drop the running header/footer lines and squeeze the blank lines groff leaves.
    lines = text.splitlines()
    if len(lines) > 4:
        lines = lines[1:-1]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _info_nodes(limit: int, rnd: random.Random) -> list[str]:
    """GNU info manuals, one document per node (the node header and tag table dropped)."""
    nodes: list[str] = []
    for f in sorted((_share() / "info").glob("*.info*.gz")):
        try:
            body = gzip.decompress(f.read_bytes()).decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for part in body.split("\x1f"):
            part = part.strip("\n")
            if part.startswith(("Tag Table:", "End Tag Table", "Indirect:", "Local Variables")):
                continue
            lines = part.split("\n")
            if lines and lines[0].startswith("File:"):
                lines = lines[1:]
            text = "\n".join(lines).strip()
            if len(text) >= 600:
                nodes.append(text[:MAX_CHARS])
    return _pick(nodes, limit, rnd)


def _pick(items: list[str], k: int, rnd: random.Random) -> list[str]:
    items = list(items)
    rnd.shuffle(items)
    return items[:k]


def _changelogs(limit: int, rnd: random.Random) -> list[str]:
    """Debian and upstream changelogs, cut at an entry boundary to 1,500-8,000 characters."""
    files = sorted((_share() / "doc").glob("*/changelog*.gz"))
    out: list[str] = []
    for f in _sample(files, limit * 2, rnd):
        try:
            body = gzip.decompress(f.read_bytes()).decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        cut = body[: rnd.randint(1500, 8000)]
        cut = cut[: cut.rfind("\n\n")] if "\n\n" in cut else cut
        if len(cut) >= 600:
            out.append(cut)
        if len(out) >= limit:
            break
    return out


def _man_sources(rnd: random.Random, english: int, per_lang: int) -> dict[str, list[Path]]:
    """Man page files to render, by group: English sections and each translated language."""
    MAN = _share() / "man"  # noqa: N806 - the folder the paths below are read from
    groups: dict[str, list[Path]] = {
        "man_commands": _sample(
            [p for s in ("man1", "man8") for p in (MAN / s).glob("*.gz")], english // 2, rnd
        ),
        "man_files": _sample(
            [p for s in ("man5", "man7") for p in (MAN / s).glob("*.gz")], english // 6, rnd
        ),
        "man_reference": _sample(list((MAN / "man3").glob("*.gz")), english // 3, rnd),
    }
    for lang_dir in sorted(p for p in MAN.iterdir() if p.is_dir() and not p.name.startswith("man")):
        pages = list(lang_dir.glob("man*/*.gz"))
        if len(pages) >= MIN_PAGES_PER_LANG:
            groups[f"clean_{lang_dir.name}"] = _sample(pages, per_lang, rnd)
    return groups


def _render_all(groups: dict[str, list[Path]]) -> pl.DataFrame:
    """Render every page (cached by the list of files and their sizes): kind, text."""
    items = [(kind, p) for kind, paths in groups.items() for p in paths]
    key = hashlib.blake2b(
        "\n".join(f"{k}\t{p}\t{p.stat().st_size}" for k, p in items).encode(), digest_size=8
    ).hexdigest()
    cache_dir = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "forensics"
    cache = cache_dir / f"eval_man-{key}.parquet"
    if cache.is_file():
        return pl.read_parquet(cache)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        texts = list(pool.map(_render, [p for _, p in items]))
    frame = pl.DataFrame(
        {"kind": [k for k, _ in items], "text": [t[:MAX_CHARS] for t in texts]}
    ).filter(pl.col("text").str.len_chars() >= 400)
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(".tmp")
    frame.write_parquet(tmp)
    tmp.replace(cache)
    return frame


LANG_OF = {"pt_BR": "pt_BR", "zh_CN": "zh_CN", "zh_TW": "zh_TW"}


def build(
    seed: int = 0, per_kind: int = 80, english: int = 900, per_lang: int = 100
) -> pl.DataFrame:
    """The labelled manual set: id, text, label, kind, partial (as `eval_corpus.build`)."""
    rnd = random.Random(seed + 100)
    rendered = _render_all(_man_sources(random.Random(seed + 101), english, per_lang))
    # The clean side holds each text once, and not the installed pages that are themselves
    # mojibake (Debian's Spanish fakeroot pages are UTF-8 decoded as cp1252): ftfy's fixer,
    # not our scorer, decides which.
    import ftfy

    rendered = rendered.unique("text", keep="first", maintain_order=True)
    broken = [ftfy.fix_encoding(t) != t for t in rendered["text"]]
    rendered = rendered.filter(~pl.Series(broken))
    rows = [
        {"text": t, "label": "clean", "kind": k, "partial": False} for k, t in rendered.iter_rows()
    ]
    info = _info_nodes(english // 4, random.Random(seed + 102))
    rows += [{"text": t, "label": "clean", "kind": "info", "partial": False} for t in info]
    logs = _changelogs(english // 6, random.Random(seed + 103))
    rows += [{"text": t, "label": "clean", "kind": "changelog", "partial": False} for t in logs]

    eng = [r["text"] for r in rows if r["kind"] in ("man_commands", "man_files", "info")]
    eng += [t for k, t in rendered.iter_rows() if k == "man_reference"]
    multi = [
        (r["kind"].removeprefix("clean_"), r["text"])
        for r in rows
        if r["kind"].startswith("clean_")
    ]
    sources = eng[::2] + [d for _, d in multi]
    rows += A.garbage_docs(sources, per_kind, rnd)
    sents = A._sentences(eng)
    rows += A.template_pages(sents, 6, rnd)
    rows += A.nav_pages(sents, per_kind, rnd)
    rows += A.doorway_pages(sents, per_kind, rnd)
    rows += A.link_farms(sents, per_kind, rnd)
    rows += A.repeated_lines(sents, per_kind, rnd)
    extra = random.Random(seed + 115)
    european = [
        d for lang, d in multi if lang in A.EUROPEAN or lang in ("it", "nl", "da", "sv", "fi", "ro")
    ]
    accented = A.latin_accented(eng + european + logs)
    rows += A.span_docs(eng + logs, accented, per_kind, extra)
    rows += A.doorway_frames(sents, per_kind, extra)
    # One to three damaged sentences in a long clean page (their own stream, as above).
    rows += eval_partial.sentence_docs(
        eng + logs + [d for _, d in multi], per_kind, random.Random(seed + 25)
    )
    return pl.DataFrame(rows, infer_schema_length=None).with_row_index("id")


if __name__ == "__main__":
    df = build()
    print(df.group_by("label", "kind").len().sort("label", "kind"))
