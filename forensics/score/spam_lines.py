"""Per-document line statistics for the spam rules: duplicated lines and paragraphs, bare link
lines and the hosts they name, boilerplate and menu lines, and the layout counts code-likeness
reads. Independent of tokens, so `forensics.score.table` runs it beside the tokenizer.

Everything is computed for the whole column at once with polars (one row per line, then a
group-by per document), never per document in Python.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from forensics.score.code import SYMBOLS, code_line_exprs
from forensics.score.utf8_scan import visible_and_ascii_class

URL = r"(?i)\b(?:https?://|www\.)[^\s<>\"'()\[\]]+"
HOST = r"(?:https?://(?:www\.)?|www\.)[^/\s:?#)\]\"'<>]+"
# A link farm points to many different sites; a README's badge block points to a handful.
MIN_HOSTS = 10
# Phrases that, on a line of their own, are site chrome rather than content.
# Matched against the lowercased line with ASCII word boundaries: Unicode-aware `\b` and `(?i)`
# made this one pattern cost as much as all the others together.
BOILERPLATE = (
    r"(?-u:\b)(?:home|about(?: us)?|contact(?: us)?|privacy(?: policy)?"
    r"|terms(?: of (?:use|service))?|cookie(?:s| policy| settings)?|sign (?:in|up)"
    r"|log ?in|log ?out|register|my account|cart"
    r"|checkout|subscribe|newsletter|follow us|share(?: this| on)?|facebook|twitter|instagram"
    r"|linkedin|youtube|pinterest|skip to (?:main )?content|menu|search|sitemap|faq|careers|blog"
    r"|all rights reserved|copyright|back to top|read more|next|previous|categories|tags)"
    r"(?-u:\b)|©"
)
# A line of chrome phrases is boilerplate only up to this many characters.
MENU_LINE_CHARS = 60
# Menu separators between short items: "Home | About | Contact", "Home » Blog".
SEPARATORS = r"\s[|»›·•/>]\s"
# A Markdown table row ("| `path` | str | The file path. |") is content, not a menu.
TABLE_ROW = r"^\|.*\|$"


def _first_seen(col: str) -> pl.Expr:
    """True for the first occurrence of a value within its document (one hashed key column)."""
    salt = pl.col("doc").cast(pl.UInt64) * pl.lit(0x9E3779B97F4A7C15, dtype=pl.UInt64)
    return (pl.col(col).hash(11) ^ salt).is_first_distinct()


def line_stats(texts: pl.Series) -> pl.DataFrame:
    """Per document: line and paragraph duplication, link lines, boilerplate lines, link hosts,
    and the layout counts of `code.code_likeness`.

    Columns: `line_chars`, `dup_line_chars`, `n_lines`, `link_lines`, `urls`, `boiler_lines`,
    `hosts`, `para_chars`, `dup_para_chars`, `code_end_lines`, `indented_lines`, `symbols`,
    `visible`.
    """
    base = pl.DataFrame({"text": texts.cast(pl.Utf8)}).lazy().with_row_index("doc")
    lines = _lines(base)
    line_agg = lines.group_by("doc").agg(
        line_chars=pl.col("n").sum(),
        dup_line_chars=pl.col("n").filter(~pl.col("first")).sum(),
        n_lines=pl.len(),
        link_lines=pl.col("link_line").sum(),
        urls=pl.col("urls").sum(),
        boiler_lines=pl.col("boiler_line").sum(),
        code_end_lines=pl.col("code_end").sum(),
        indented_lines=pl.col("indented").sum(),
    )
    hosts = _link_hosts(lines)
    paras = _paragraphs(base)
    visible, symbols = visible_and_ascii_class(texts, SYMBOLS)
    symbols = pl.LazyFrame(
        {"doc": np.arange(len(texts), dtype=np.uint32), "symbols": symbols, "visible": visible}
    )
    out = (
        symbols.join(line_agg, on="doc", how="left")
        .join(hosts, on="doc", how="left")
        .join(paras, on="doc", how="left")
        .sort("doc")
        .collect()
    )
    return out.fill_null(0)


def _lines(base: pl.LazyFrame) -> pl.LazyFrame:
    """One row per non-empty line: its length, URLs, boilerplate and separator counts, whether
    it was seen before in its document, and whether it is a bare link or boilerplate line."""
    return (
        base.select("doc", pl.col("text").str.split("\n").alias("line"))
        .explode("line")
        .with_columns(**code_line_exprs(pl.col("line")))
        .with_columns(pl.col("line").str.strip_chars())
        .filter(pl.col("line").str.len_chars() > 0)
        .with_columns(
            n=pl.col("line").str.len_chars(),
            urls=pl.col("line").str.count_matches(URL),
            # Counted on short lines only (`boiler_line` reads it there): lowercasing and
            # matching every line of prose cost a quarter of the line statistics.
            boiler=pl.when(pl.col("line").str.len_chars() <= MENU_LINE_CHARS)
            .then(pl.col("line"))
            .otherwise(pl.lit(""))
            .str.to_lowercase()
            .str.count_matches(BOILERPLATE),
            seps=pl.col("line").str.count_matches(SEPARATORS),
            first=_first_seen("line"),
        )
        .with_columns(
            # A "bare link" line is mostly URL: under 60 characters outside its URLs.
            link_line=(pl.col("urls") > 0)
            & (
                pl.when(pl.col("urls") > 0)
                .then(pl.col("line"))
                .otherwise(pl.lit(""))
                .str.replace_all(URL, "")
                .str.len_chars()
                < 60
            ),
            # Boilerplate: a short line made of chrome phrases, or a separator-delimited menu.
            boiler_line=((pl.col("boiler") >= 1) & (pl.col("n") <= MENU_LINE_CHARS))
            | ((pl.col("seps") >= 2) & ~pl.col("line").str.contains(TABLE_ROW)),
        )
    )


def _link_hosts(lines: pl.LazyFrame) -> pl.LazyFrame:
    """Per document, how many distinct hosts its link lines name."""
    return (
        lines.filter(pl.col("urls") > 0)
        .select("doc", host=pl.col("line").str.to_lowercase().str.extract_all(HOST))
        .explode("host")
        .drop_nulls("host")
        .unique()
        .group_by("doc")
        .agg(hosts=pl.len())
    )


def _paragraphs(base: pl.LazyFrame) -> pl.LazyFrame:
    """Per document, the characters in paragraphs and in paragraphs seen before in it."""
    return (
        base.select(
            "doc",
            pl.col("text")
            .str.replace_all(r"\n[ \t\r]*\n\s*", "\u2029")
            .str.split("\u2029")
            .alias("p"),
        )
        .explode("p")
        .with_columns(pl.col("p").str.strip_chars())
        .filter(pl.col("p").str.len_chars() > 0)
        .with_columns(n=pl.col("p").str.len_chars(), first=_first_seen("p"))
        .group_by("doc")
        .agg(
            para_chars=pl.col("n").sum(), dup_para_chars=pl.col("n").filter(~pl.col("first")).sum()
        )
    )
