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
STOPWORDS = frozenset(
    "the a an and or of to in on for with by at from as is are was were be been it its this that "
    "these those you your we our they their he she his her not no but if then than so can will "
    "do does did has have had i me my all any more most other some such only own same too very "
    "just also into over under about after before between out up down off again further once "
    "here there when where why how what which who whom each few both nor s t don should now "
    # URL pieces are not keywords.
    "http https www com org net io html htm php github".split()
)


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


def _line_stats(texts: pl.Series) -> pl.DataFrame:
    """Per document: line and paragraph duplication, link lines, boilerplate lines.

    Columns: `line_chars`, `dup_line_chars`, `n_lines`, `link_lines`, `urls`, `boiler_lines`,
    `para_chars`, `dup_para_chars`.
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
            url_chars=pl.col("line")
            .str.extract_all(URL)
            .list.eval(pl.element().str.len_chars())
            .list.sum(),
            words=pl.col("line").str.count_matches(r"\w+"),
            boiler=pl.col("line").str.count_matches(BOILERPLATE),
            seps=pl.col("line").str.count_matches(SEPARATORS),
            host=pl.col("line").str.to_lowercase().str.extract_all(HOST),
        )
        .with_columns(
            # A "bare link" line is mostly URL: at most 8 words outside its URLs.
            link_line=(pl.col("urls") > 0)
            & ((pl.col("n") - pl.col("url_chars").fill_null(0)) < 60),
            # Boilerplate: a short line made of chrome phrases, or a separator-delimited menu.
            boiler_line=((pl.col("boiler") >= 1) & (pl.col("words") <= 8)) | (pl.col("seps") >= 2),
            first=pl.int_range(pl.len()).over(["doc", "line"]) == 0,
        )
    )
    line_agg = lines.group_by("doc").agg(
        line_chars=pl.col("n").sum(),
        dup_line_chars=pl.col("n").filter(~pl.col("first")).sum(),
        n_lines=pl.len(),
        link_lines=pl.col("link_line").sum(),
        urls=pl.col("urls").sum(),
        boiler_lines=pl.col("boiler_line").sum(),
        hosts=pl.col("host").list.explode(keep_nulls=False, empty_as_null=False).n_unique(),
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
        .with_columns(
            n=pl.col("p").str.len_chars(), first=pl.int_range(pl.len()).over(["doc", "p"]) == 0
        )
        .group_by("doc")
        .agg(
            para_chars=pl.col("n").sum(), dup_para_chars=pl.col("n").filter(~pl.col("first")).sum()
        )
    )
    out = (
        base.select("doc")
        .join(line_agg, on="doc", how="left")
        .join(paras, on="doc", how="left")
        .sort("doc")
        .collect()
    )
    return out.fill_null(0)


def _word_stats(tok: Tokens, texts: pl.Series) -> dict[str, np.ndarray]:
    """Per document: n-gram coverage, repeated 6-gram coverage, top keyword share."""
    n_docs = tok.n_docs
    n_words = np.bincount(tok.doc, minlength=n_docs)
    word_chars = np.bincount(tok.doc, weights=tok.length, minlength=n_docs)
    out: dict[str, np.ndarray] = {"n_words": n_words}
    cum_len = np.concatenate([[0], np.cumsum(tok.length)])
    for n in (2, 3, 4):
        starts, h = ngram_hashes(tok.doc, tok.hash, n)
        if len(starts) == 0:
            out[f"top_{n}gram"] = np.zeros(n_docs)
            continue
        chars = cum_len[starts + n] - cum_len[starts]
        top = (
            pl.DataFrame({"doc": tok.doc[starts], "h": h, "c": chars})
            .group_by("doc", "h")
            .agg(cnt=pl.len(), c=pl.col("c").first())
            .filter(pl.col("cnt") > 1)
            .group_by("doc")
            .agg(cov=(pl.col("cnt") * pl.col("c")).max())
        )
        cov = np.zeros(n_docs)
        cov[top["doc"].to_numpy()] = top["cov"].to_numpy()
        out[f"top_{n}gram"] = np.divide(cov, np.maximum(word_chars, 1))
    # Words covered by a 6-gram that occurs more than once in the same document.
    starts, h = ngram_hashes(tok.doc, tok.hash, 6)
    covered = np.zeros(n_docs)
    if len(starts):
        f = pl.DataFrame({"doc": tok.doc[starts], "h": h, "s": starts})
        dup = f.filter(pl.len().over("doc", "h") > 1)["s"].to_numpy()
        marks = np.zeros(len(tok.doc) + 7, dtype=np.int64)
        np.add.at(marks, dup, 1)
        np.add.at(marks, dup + 6, -1)
        inside = np.cumsum(marks)[: len(tok.doc)] > 0
        covered = np.bincount(tok.doc[inside], minlength=n_docs).astype(float)
    out["dup_6gram"] = np.divide(covered, np.maximum(n_words, 1))
    # Keyword stuffing: the share of words taken by the TOP_KEYWORDS most frequent content words
    # (not stopwords, >= 3 letters): a doorway page is its keyword plus a few modifiers.
    stop = pl.Series(sorted(STOPWORDS)).hash(17).to_numpy()
    content = (tok.length >= 3) & ~np.isin(tok.hash, stop) & ~tok.masked
    kw = (
        pl.DataFrame(
            {"doc": tok.doc[content], "h": tok.hash[content], "i": np.flatnonzero(content)}
        )
        .group_by("doc", "h")
        .agg(cnt=pl.len(), i=pl.col("i").first())
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
