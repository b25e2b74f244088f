"""Per-document template-spam signals: repetition, keyword stuffing, link farms, boilerplate.

Each signal is a ratio in [0, 1] with a threshold (>= threshold: flagged) and a saturation point,
in the style of datatrove's Gopher filters. Thresholds start from Gopher's published values and
are loosened where technical prose legitimately repeats (code blocks, changelogs, tables):
Gopher repetition flags ~10% of such clean text. Every statistic is computed for the whole column
at once (polars group-bys and numpy on flat word arrays), never per document in Python.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from forensics.score.tokens import Tokens, ngram_hashes

# Documents with fewer words are scored with proportionally damped per-document signals:
# repetition statistics on a handful of words are noise.
MIN_WORDS = 50
TOP_KEYWORDS = 5

URL = r"(?i)\b(?:https?://|www\.)[^\s<>\"'()\[\]]+"
HOST = r"(?:https?://(?:www\.)?|www\.)[^/\s:?#)\]\"'<>]+"
# A link farm points to many different sites; a README's badge block points to a handful.
MIN_HOSTS = 10
# Phrases that, on a line of their own, are site chrome rather than content.
BOILERPLATE = (
    r"(?i)\b(?:home|about(?: us)?|contact(?: us)?|privacy(?: policy)?|terms(?: of (?:use|service))?"
    r"|cookie(?:s| policy| settings)?|sign (?:in|up)|log ?in|log ?out|register|my account|cart"
    r"|checkout|subscribe|newsletter|follow us|share(?: this| on)?|facebook|twitter|instagram"
    r"|linkedin|youtube|pinterest|skip to (?:main )?content|menu|search|sitemap|faq|careers|blog"
    r"|all rights reserved|copyright|back to top|read more|next|previous|categories|tags)\b|©"
)
# Menu separators between short items: "Home | About | Contact", "Home » Blog".
SEPARATORS = r"\s[|»›·•/>]\s"


@dataclass(frozen=True)
class Rule:
    """A ratio signal: flagged at `threshold`, score saturates at `full`."""

    name: str
    threshold: float
    full: float
    describe: str  # format string with {v} (the ratio as a percentage) for the reason


RULES: tuple[Rule, ...] = (
    Rule("dup_line_chars", 0.30, 0.70, "{v} of characters in duplicated lines"),
    Rule("dup_para_chars", 0.30, 0.70, "{v} of characters in duplicated paragraphs"),
    Rule("top_2gram", 0.20, 0.40, "top 2-gram covers {v} of word characters"),
    Rule("top_3gram", 0.18, 0.35, "top 3-gram covers {v} of word characters"),
    Rule("top_4gram", 0.16, 0.30, "top 4-gram covers {v} of word characters"),
    Rule("dup_6gram", 0.50, 0.85, "{v} of words inside repeated 6-grams"),
    Rule("keyword", 0.40, 0.70, "keyword stuffing: '{kw}' and 4 more words are {v} of words"),
    Rule("link_lines", 0.50, 0.85, "link farm: {v} of lines are bare links ({links} URLs)"),
    Rule("boilerplate", 0.45, 0.80, "navigation/footer boilerplate: {v} of lines"),
)


REPETITION = frozenset(
    {"dup_line_chars", "dup_para_chars", "top_2gram", "top_3gram", "top_4gram", "dup_6gram"}
)


def _first_seen(col: str) -> pl.Expr:
    """True for the first occurrence of a value within its document (one hashed key column)."""
    salt = pl.col("doc").cast(pl.UInt64) * pl.lit(0x9E3779B97F4A7C15, dtype=pl.UInt64)
    return (pl.col(col).hash(11) ^ salt).is_first_distinct()


def _line_stats(texts: pl.Series) -> pl.DataFrame:
    """Per document: line and paragraph duplication, link lines, boilerplate lines, link hosts.

    Columns: `line_chars`, `dup_line_chars`, `n_lines`, `link_lines`, `urls`, `boiler_lines`,
    `hosts`, `para_chars`, `dup_para_chars`.
    """
    base = pl.DataFrame({"text": texts.cast(pl.Utf8)}).lazy().with_row_index("doc")
    lines = (
        base.select("doc", pl.col("text").str.split("\n").alias("line"))
        .explode("line")
        .with_columns(pl.col("line").str.strip_chars())
        .filter(pl.col("line").str.len_chars() > 0)
        .with_columns(
            n=pl.col("line").str.len_chars(),
            urls=pl.col("line").str.count_matches(URL),
            boiler=pl.col("line").str.count_matches(BOILERPLATE),
            seps=pl.col("line").str.count_matches(SEPARATORS),
            first=_first_seen("line"),
        )
        .with_columns(
            # A "bare link" line is mostly URL: under 60 characters outside its URLs.
            link_line=(pl.col("urls") > 0)
            & (pl.col("line").str.replace_all(URL, "").str.len_chars() < 60),
            # Boilerplate: a short line made of chrome phrases, or a separator-delimited menu.
            boiler_line=((pl.col("boiler") >= 1) & (pl.col("n") <= 60)) | (pl.col("seps") >= 2),
        )
    )
    line_agg = lines.group_by("doc").agg(
        line_chars=pl.col("n").sum(),
        dup_line_chars=pl.col("n").filter(~pl.col("first")).sum(),
        n_lines=pl.len(),
        link_lines=pl.col("link_line").sum(),
        urls=pl.col("urls").sum(),
        boiler_lines=pl.col("boiler_line").sum(),
    )
    hosts = (
        lines.filter(pl.col("urls") > 0)
        .select("doc", host=pl.col("line").str.to_lowercase().str.extract_all(HOST))
        .explode("host")
        .drop_nulls("host")
        .unique()
        .group_by("doc")
        .agg(hosts=pl.len())
    )
    paras = (
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
    out = (
        base.select("doc")
        .join(line_agg, on="doc", how="left")
        .join(hosts, on="doc", how="left")
        .join(paras, on="doc", how="left")
        .sort("doc")
        .collect()
    )
    return out.fill_null(0)


def _per_doc_max(doc: np.ndarray, value: np.ndarray, n_docs: int) -> np.ndarray:
    out = np.zeros(n_docs)
    np.maximum.at(out, doc, value)
    return out


def _word_stats(tok: Tokens, texts: pl.Series) -> dict[str, np.ndarray]:
    """Per document: n-gram coverage, repeated 6-gram coverage, top keyword share.

    Word hashes are salted with the document id first, so every "same n-gram in the same
    document" question is a group-by on one uint64 column.
    """
    n_docs = tok.n_docs
    n_words = np.bincount(tok.doc, minlength=n_docs)
    word_chars = np.bincount(tok.doc, weights=tok.length, minlength=n_docs)
    out: dict[str, np.ndarray] = {"n_words": n_words}
    with np.errstate(over="ignore"):
        salted = tok.hash ^ (tok.doc.astype(np.uint64) * np.uint64(0xD6E8FEB86659FD93))
    cum_len = np.concatenate([[0], np.cumsum(tok.length)])
    for n in (2, 3, 4):
        starts, h = ngram_hashes(tok.doc, salted, n)
        if len(starts) == 0:
            out[f"top_{n}gram"] = np.zeros(n_docs)
            continue
        top = (
            pl.DataFrame({"h": h, "s": starts})
            .group_by("h")
            .agg(cnt=pl.len(), s=pl.col("s").first())
            .filter(pl.col("cnt") > 1)
        )
        s0 = top["s"].to_numpy()
        chars = cum_len[s0 + n] - cum_len[s0]
        cov = _per_doc_max(tok.doc[s0], top["cnt"].to_numpy() * chars, n_docs)
        out[f"top_{n}gram"] = np.divide(cov, np.maximum(word_chars, 1))
    # Words covered by a 6-gram that occurs more than once in the same document.
    starts, h = ngram_hashes(tok.doc, salted, 6)
    covered = np.zeros(n_docs)
    if len(starts):
        dup = starts[pl.Series(h).is_duplicated().to_numpy()]
        size = len(tok.doc) + 7
        marks = np.bincount(dup, minlength=size) - np.bincount(dup + 6, minlength=size)
        inside = np.cumsum(marks)[: len(tok.doc)] > 0
        covered = np.bincount(tok.doc[inside], minlength=n_docs).astype(float)
    out["dup_6gram"] = np.divide(covered, np.maximum(n_words, 1))
    # Keyword stuffing: the share of words taken by the TOP_KEYWORDS most frequent content words
    # (not stopwords, >= 3 letters): a doorway page is its keyword plus a few modifiers.
    content = np.flatnonzero(tok.content)
    kw = (
        pl.DataFrame({"h": salted[content], "i": content, "doc": tok.doc[content]})
        .group_by("h")
        .agg(cnt=pl.len(), i=pl.col("i").first(), doc=pl.col("doc").first())
        .sort("cnt", descending=True)
        .group_by("doc")
        .agg(cnt=pl.col("cnt").head(TOP_KEYWORDS).sum(), i=pl.col("i").first())
    )
    top_kw = np.zeros(n_docs)
    kw_index = np.full(n_docs, -1, dtype=np.int64)
    top_kw[kw["doc"].to_numpy()] = kw["cnt"].to_numpy()
    kw_index[kw["doc"].to_numpy()] = kw["i"].to_numpy()
    out["keyword"] = np.divide(top_kw, np.maximum(n_words, 1))
    out["keyword_index"] = kw_index
    return out


def _rule_score(value: np.ndarray, rule: Rule) -> np.ndarray:
    below = 0.5 * np.minimum(value / rule.threshold, 1.0) * 0.9
    above = 0.5 + 0.5 * np.clip((value - rule.threshold) / (rule.full - rule.threshold), 0, 1)
    return np.where(value >= rule.threshold, above, below)


def spam_signals(texts: pl.Series, tok: Tokens) -> tuple[np.ndarray, list[str], dict]:
    """Per-document spam score (max over rules) and reason; also the raw signal values."""
    lines = _line_stats(texts)
    words = _word_stats(tok, texts)
    line_chars = lines["line_chars"].to_numpy().astype(float)
    n_lines = lines["n_lines"].to_numpy().astype(float)
    values = {
        "dup_line_chars": lines["dup_line_chars"].to_numpy() / np.maximum(line_chars, 1),
        "dup_para_chars": lines["dup_para_chars"].to_numpy()
        / np.maximum(lines["para_chars"].to_numpy(), 1),
        "top_2gram": words["top_2gram"],
        "top_3gram": words["top_3gram"],
        "top_4gram": words["top_4gram"],
        "dup_6gram": words["dup_6gram"],
        "keyword": words["keyword"],
        "link_lines": lines["link_lines"].to_numpy() / np.maximum(n_lines, 1),
        "boilerplate": lines["boiler_lines"].to_numpy() / np.maximum(n_lines, 1),
    }
    # Line-shaped signals need enough lines to mean anything.
    few_lines = n_lines < 8
    few_hosts = lines["hosts"].to_numpy() < MIN_HOSTS
    values["link_lines"] = np.where(few_lines | few_hosts, 0.0, values["link_lines"])
    values["boilerplate"] = np.where(few_lines, 0.0, values["boilerplate"])
    damp = np.minimum(1.0, words["n_words"] / MIN_WORDS)
    matrix = np.column_stack([_rule_score(values[r.name], r) for r in RULES])
    matrix = matrix * damp[:, None]
    # Corroboration: one repetition statistic alone is a quirk of the text (an author list, a
    # changelog, a table); spam trips at least two. The family scores its second-best rule.
    fam = np.array([r.name in REPETITION for r in RULES])
    if fam.sum() >= 2:
        sub = np.sort(matrix[:, fam], axis=1)
        second = sub[:, -2]
        matrix[:, fam] = np.minimum(matrix[:, fam], second[:, None])
    best = matrix.argmax(axis=1)
    score = matrix.max(axis=1)
    reasons = [""] * len(score)
    flagged = np.flatnonzero(score >= 0.5)
    urls = lines["urls"].to_numpy()
    kw_texts = {}
    if len(flagged):
        kw_rows = [i for i in flagged if RULES[best[i]].name == "keyword"]
        kw_texts = (
            dict(zip(kw_rows, texts.gather(kw_rows).to_list(), strict=True)) if kw_rows else {}
        )
    for i in flagged:
        rule = RULES[best[i]]
        v = f"{100 * values[rule.name][i]:.0f}%"
        kw = (
            _keyword_text(kw_texts.get(i), tok, int(words["keyword_index"][i]))
            if i in kw_texts
            else ""
        )
        reasons[i] = rule.describe.format(v=v, kw=kw, links=int(urls[i]))
    return score, reasons, values


def _keyword_text(text: str | None, tok: Tokens, index: int) -> str:
    """The stuffed keyword itself, recovered by re-tokenising only that document."""
    import re

    from forensics.safe_text import excerpt

    if text is None or index < 0:
        return ""
    first = int(np.searchsorted(tok.doc, tok.doc[index]))
    words = re.findall(r"\w+", text)
    k = index - first
    return excerpt(words[k].lower(), 30) if 0 <= k < len(words) else ""
