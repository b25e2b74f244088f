"""Per-document template-spam signals: repetition, keyword stuffing, link farms, boilerplate.

Each signal is a ratio in [0, 1] with a threshold (>= threshold: flagged) and a saturation point,
in the style of datatrove's Gopher filters. Thresholds start from Gopher's published values and
are loosened where technical prose legitimately repeats (code blocks, changelogs, tables):
Gopher repetition flags ~10% of such clean text. Every statistic is computed for the whole column
at once (polars group-bys and numpy on flat word arrays), never per document in Python.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

from forensics.safe_text import excerpt
from forensics.score.code import code_likeness, prose_likeness
from forensics.score.doc_counts import doc_bounds, ngram_stats, top_keyword
from forensics.score.doorway import (
    MIN_KEYWORD_SHARE,
    MIN_SENTENCES,
    SENTENCE_END,
    DoorwayFrames,
)
from forensics.score.licence import is_licence
from forensics.score.notation import (
    NOTATION_CHUNK,
    NOTATION_SHARE,
    has_cjk,
    notation_share,
    spaced_density,
    spaced_phrase_share,
)
from forensics.score.spam_lines import MIN_HOSTS, line_stats
from forensics.score.tokens import WORD, Tokens, tokenize

# Documents with fewer words are scored with proportionally damped per-document signals:
# repetition statistics on a handful of words are noise.
MIN_WORDS = 50
# Documents whose top content word is at least this share of words get the phrase check.
KEYWORD_MIN_SHARE = 0.05
KEYWORD_MAX_GAP = 4  # words between consecutive occurrences (median)
KEYWORD_MIN_COUNT = 10
# Phrases: text between punctuation marks or line breaks. A "." or ":" inside a token (a version,
# a file name, a dotted path, an address) does not end a phrase.
FRAGMENT = r"(?:[^,.;:!?\n|]|[.:][^\s,.;:!?|])+"
SHORT_PHRASE = 4  # words: a keyword and a modifier or two

# Rules that measure natural-language repetition: weighed by prose-likeness (see `code.py`),
# since identifiers in source code repeat like a stuffed keyword.
PROSE_RULES = (
    "top_2gram", "top_3gram", "top_4gram", "dup_6gram", "keyword", "keyword_density", "doorway"
)  # fmt: skip


@dataclass(frozen=True)
class Rule:
    """A ratio signal: flagged at `threshold`, score saturates at `full`."""

    name: str
    threshold: float
    full: float
    describe: str  # format string with {v} (the ratio as a percentage) for the reason


def _describe(rule: Rule, ratio: float) -> str:
    """The reason's wording. Gopher's top n-gram ratio counts overlapping occurrences (the n-gram's
    characters times its count, over the word characters), so a page of one word repeated reads
    above 100%: said as a multiple there, not as a share a page cannot exceed."""
    if rule.name.startswith("top_") and ratio > 1:
        n = rule.name.removeprefix("top_").removesuffix("gram")
        return (
            f"top {n}-gram repeated end to end: its occurrences add up to {ratio:.1f}x "
            "the word characters"
        )
    return rule.describe


RULES: tuple[Rule, ...] = (
    Rule("dup_line_chars", 0.30, 0.70, "{v} of characters in duplicated lines"),
    Rule("dup_para_chars", 0.30, 0.70, "{v} of characters in duplicated paragraphs"),
    Rule("top_2gram", 0.20, 0.40, "top 2-gram covers {v} of word characters"),
    Rule("top_3gram", 0.18, 0.35, "top 3-gram covers {v} of word characters"),
    Rule("top_4gram", 0.16, 0.30, "top 4-gram covers {v} of word characters"),
    Rule("dup_6gram", 0.50, 0.85, "{v} of words inside repeated 6-grams"),
    Rule("keyword", 0.30, 0.60, "keyword stuffing: '{kw}' in {v} of phrases, all short"),
    Rule(
        "keyword_density", 0.08, 0.20, "keyword stuffing: '{kw}' is {v} of words, every few words"
    ),
    Rule("link_lines", 0.50, 0.85, "link farm: {v} of lines are bare links ({links} URLs)"),
    Rule("boilerplate", 0.45, 0.80, "navigation/footer boilerplate: {v} of lines"),
    Rule("doorway", 0.80, 0.95, DoorwayFrames.describe),
)


REPETITION_SOURCES = (
    ("top_2gram", "top_3gram", "top_4gram"),
    ("dup_line_chars", "dup_para_chars"),
    ("dup_6gram",),
)
# Rules a licence or copyright notice meets by its form (see `licence.py`).
LICENCE_WAIVED = frozenset(n for group in REPETITION_SOURCES for n in group) | {"boilerplate"}


def _word_stats(tok: Tokens, texts: pl.Series) -> dict[str, np.ndarray]:
    """Per document: n-gram coverage, repeated 6-gram coverage, top keyword share and spacing.

    Keys: `n_words`; `top_2gram`..`top_4gram` (the most repeated n-gram's count x characters,
    over the document's word characters); `dup_6gram` (share of words inside a 6-gram that
    occurs twice or more); `keyword_share` (the most frequent repeated content word, i.e. not a
    stopword, >= 3 letters, not a name or number, over all words); `keyword_index` (its first
    position in the flat token arrays, -1 when none); `keyword_gap` (median distance in words
    between its consecutive occurrences: a stuffed page repeats its keyword every few words
    throughout, a README names its package in bursts). All from compiled per-document loops
    (`doc_counts`).
    """
    bounds = tok.bounds if tok.bounds is not None else doc_bounds(tok.doc, tok.n_docs)
    n_words = np.diff(bounds)
    word_chars = np.bincount(tok.doc, weights=tok.length, minlength=tok.n_docs)
    top, covered = ngram_stats(bounds, tok.hash, tok.length, 6)
    out: dict[str, np.ndarray] = {"n_words": n_words}
    for j, n in enumerate((2, 3, 4)):
        out[f"top_{n}gram"] = np.divide(top[:, j], np.maximum(word_chars, 1))
    out["dup_6gram"] = np.divide(covered, np.maximum(n_words, 1))
    count, index, gap = top_keyword(bounds, tok.hash, tok.content)
    out["keyword_share"] = np.divide(count, np.maximum(n_words, 1))
    out["keyword_index"] = index
    out["keyword_gap"] = gap
    return out


def _keyword_frame(
    texts: pl.Series, tok: Tokens, kw_index: np.ndarray, rows: np.ndarray
) -> pl.DataFrame:
    """Columns `row`, `text`, `kw`: each row's top content word as text (lowercased).

    `kw_index` points into the flat token arrays; the word is re-extracted from the text with
    the tokeniser's own pattern, at its position within the document.
    """
    rows = rows[kw_index[rows] >= 0]
    k = kw_index[rows] - np.searchsorted(tok.doc, rows)
    return pl.DataFrame({"row": rows, "text": texts.gather(rows), "k": k}).with_columns(
        kw=pl.col("text")
        .str.extract_all(WORD)
        .list.get(pl.col("k"), null_on_oob=True)
        .str.to_lowercase()
    )


def _keyword_fragments(
    texts: pl.Series, tok: Tokens, words: dict[str, np.ndarray]
) -> tuple[np.ndarray, dict[int, str]]:
    """Keyword stuffing: the share of a page's phrases that are short and carry its top word.

    A doorway page is its keyword in a list of short phrases ("cheap flights, flights online,
    best cheap flights"); a README names its package as often, but inside sentences and code.
    Computed only for documents whose top content word is at least KEYWORD_MIN_SHARE of words.
    Returns (share [n_docs], keyword by row).
    """
    n_docs = tok.n_docs
    share = np.zeros(n_docs)
    idx = words["keyword_index"]
    cand = np.flatnonzero(
        (words["keyword_share"] >= KEYWORD_MIN_SHARE) & (words["n_words"] >= MIN_WORDS) & (idx >= 0)
    )
    if len(cand) == 0:
        return share, {}
    frame = _keyword_frame(texts, tok, idx, cand)
    frags = (
        frame.lazy()
        .select("row", "kw", f=pl.col("text").str.to_lowercase().str.extract_all(FRAGMENT))
        .explode("f")
        .with_columns(w=pl.col("f").str.extract_all(r"\w+"))
        .filter(pl.col("w").list.len() > 0)
        .with_columns(
            hit=(pl.col("w").list.len() <= SHORT_PHRASE) & pl.col("w").list.contains(pl.col("kw"))
        )
        .group_by("row")
        .agg(n=pl.len(), hits=pl.col("hit").sum())
        .collect()
    )
    rows = frags["row"].to_numpy()
    hits = frags["hits"].to_numpy()
    ratio = np.where(hits >= 5, hits / np.maximum(frags["n"].to_numpy(), 1), 0.0)
    share[rows] = ratio
    keywords = dict(zip(frame["row"].to_list(), frame["kw"].to_list(), strict=True))
    return share, keywords


def _doorway(
    texts: pl.Series, tok: Tokens, words: dict[str, np.ndarray], keywords: dict[int, str]
) -> np.ndarray:
    """`DoorwayFrames` on the pages whose top content word is >= MIN_KEYWORD_SHARE of words.

    Keywords already found by the phrase check are reused; the others are looked up (and
    added to `keywords`, so the reason can name them).
    """
    idx = words["keyword_index"]
    kw_count = words["keyword_share"] * words["n_words"]
    cand = np.flatnonzero(
        (words["keyword_share"] >= MIN_KEYWORD_SHARE)
        & (words["n_words"] >= MIN_WORDS)
        & (idx >= 0)
        & (kw_count >= 0.8 * MIN_SENTENCES)
    )
    if len(cand) == 0:
        return np.zeros(tok.n_docs)
    # A page can only have its keyword in 80% of its sentences if the keyword occurs at least
    # half as often as there are sentence breaks (titles and short lines included): one cheap
    # native count drops most pages before the per-sentence work.
    breaks = texts.gather(cand).str.count_matches(SENTENCE_END).fill_null(0).to_numpy()
    cand = cand[kw_count[cand] >= 0.5 * breaks]
    if len(cand) == 0:
        return np.zeros(tok.n_docs)
    frame = _keyword_frame(texts, tok, idx, cand).select("row", "text", "kw")
    keywords.update((r, k) for r, k in zip(frame["row"], frame["kw"], strict=True) if k)
    return DoorwayFrames().scores(tok.n_docs, frame.drop_nulls("kw"))


def _rule_score(value: np.ndarray, rule: Rule) -> np.ndarray:
    below = 0.5 * np.minimum(value / rule.threshold, 1.0) * 0.9
    above = 0.5 + 0.5 * np.clip((value - rule.threshold) / (rule.full - rule.threshold), 0, 1)
    return np.where(value >= rule.threshold, above, below)


@dataclass(frozen=True)
class SpamSignals:
    """Per-document spam result of one batch: `score` float64 [n] (max over rules), `reasons`
    (human, "" when not flagged), `rules` (the `Rule` name the reason comes from, "" when not
    flagged), `values` (every rule's raw value [n], plus `code_likeness`)."""

    score: np.ndarray
    reasons: list[str]
    rules: list[str]
    values: dict[str, np.ndarray]

    @staticmethod
    def concat(parts: list[SpamSignals]) -> SpamSignals:
        """Batches in order (`values` dropped: per batch only)."""
        return SpamSignals(
            np.concatenate([p.score for p in parts]) if parts else np.zeros(0),
            [r for p in parts for r in p.reasons],
            [r for p in parts for r in p.rules],
            {},
        )


def _rule_values(
    words: dict[str, np.ndarray], kw_share: np.ndarray, doorway: np.ndarray, lines: pl.DataFrame
) -> dict[str, np.ndarray]:
    """Every `Rule`'s ratio per document, before weighting; plus `code_likeness`.

    Line-shaped rules need enough lines (and a link farm enough hosts) to mean anything;
    natural-language rules (`PROSE_RULES`) are weighed by prose-likeness (`code.py`).
    """
    line = {c: lines[c].to_numpy().astype(float) for c in lines.columns}
    n_lines = line["n_lines"]
    values = {
        "dup_line_chars": line["dup_line_chars"] / np.maximum(line["line_chars"], 1),
        "dup_para_chars": line["dup_para_chars"] / np.maximum(line["para_chars"], 1),
        "top_2gram": words["top_2gram"],
        "top_3gram": words["top_3gram"],
        "top_4gram": words["top_4gram"],
        "dup_6gram": words["dup_6gram"],
        "keyword": kw_share,
        # Keyword density counts only when the keyword recurs every few words (median gap) and
        # often enough to be a pattern.
        "keyword_density": np.where(
            (words["keyword_gap"] <= KEYWORD_MAX_GAP)
            & (words["keyword_share"] * words["n_words"] >= KEYWORD_MIN_COUNT),
            words["keyword_share"],
            0.0,
        ),
        "link_lines": line["link_lines"] / np.maximum(n_lines, 1),
        "boilerplate": line["boiler_lines"] / np.maximum(n_lines, 1),
        "doorway": doorway,
    }
    few_lines = n_lines < 8
    values["link_lines"][few_lines | (line["hosts"] < MIN_HOSTS)] = 0.0
    values["boilerplate"][few_lines] = 0.0
    code = code_likeness(
        line["symbols"], line["visible"], line["code_end_lines"], line["indented_lines"], n_lines
    )
    prose = prose_likeness(code)
    for name in PROSE_RULES:
        values[name] = values[name] * prose
    values["code_likeness"] = code
    return values


def _rule_matrix(values: dict[str, np.ndarray], n_words: np.ndarray) -> np.ndarray:
    """float64 [n_docs, len(RULES)]: each rule's score, damped on short documents, with the
    repetition family capped by its corroboration.

    One kind of repetition alone is a quirk of the text (an author list, a changelog, a table
    of near-identical rows); spam repeats in at least two independent ways. Top 2/3/4-gram
    coverage are one source of evidence (they move together), duplicated lines/paragraphs
    another, repeated 6-grams a third; the family scores its second-best source.
    """
    damp = np.minimum(1.0, n_words / MIN_WORDS)
    matrix = np.column_stack([_rule_score(values[r.name], r) for r in RULES]) * damp[:, None]
    names = [r.name for r in RULES]
    sources = [[names.index(n) for n in group] for group in REPETITION_SOURCES]
    best_of = np.column_stack([matrix[:, cols].max(axis=1) for cols in sources])
    second = np.sort(best_of, axis=1)[:, -2]
    family = [i for cols in sources for i in cols]
    matrix[:, family] = np.minimum(matrix[:, family], second[:, None])
    return matrix


def _remeasure_prose(matrix: np.ndarray, values: dict[str, np.ndarray], texts: pl.Series) -> None:
    """Score again, in place, the repetition family of the pages it flags, with their n-gram
    statistics measured on their prose: the text without its notation (`NOTATION_CHUNK`).

    Why: a reference page's qualified names, roles and links repeat their package path by
    construction (``:attr:`~django.views.generic.edit.FormMixin.initial` `` on every line of an
    attribute list), which reads to the n-gram rules as a phrase repeated a hundred times. A
    farm repeats its sentences as words. Line and paragraph duplication stay as measured; the
    repeated n-grams and the damping for short pages use the prose's words.
    """
    names = [r.name for r in RULES]
    family = [names.index(n) for group in REPETITION_SOURCES for n in group]
    rows = np.flatnonzero(matrix[:, family].max(axis=1) >= 0.5)
    if len(rows) == 0:
        return
    prose = texts.gather(rows).str.replace_all(NOTATION_CHUNK, " ")
    words = _word_stats(tokenize(prose), prose)
    sub = {k: v[rows] for k, v in values.items()}
    weight = prose_likeness(sub["code_likeness"])
    for name in ("top_2gram", "top_3gram", "top_4gram", "dup_6gram"):
        sub[name] = words[name] * weight
    again = _rule_matrix(sub, words["n_words"])
    matrix[np.ix_(rows, family)] = np.minimum(matrix[np.ix_(rows, family)], again[:, family])


def _waive_for_licences(matrix: np.ndarray, texts: pl.Series) -> None:
    """Zero, in place, the `LICENCE_WAIVED` rules of the flagged pages that are licence or
    copyright notices (checked only on flagged pages: the regexes then cost nothing)."""
    flagged = np.flatnonzero(matrix.max(axis=1) >= 0.5)
    notices = flagged[is_licence(texts, flagged)]
    if len(notices):
        cols = [i for i, r in enumerate(RULES) if r.name in LICENCE_WAIVED]
        matrix[np.ix_(notices, cols)] = 0.0


def _waive_for_notation(
    matrix: np.ndarray,
    values: dict[str, np.ndarray],
    texts: pl.Series,
    tok: Tokens,
    words: dict,
    keywords: dict[int, str],
) -> None:
    """Score again, in place, the keyword rules of the pages they flag, counting the keyword
    only where it is prose (checked only on those pages).

    Why: a manual repeats its command inside the notation it shows (signatures, roles, paths,
    the command lines opened by a prompt: `notation.py`) as often as it runs it; a stuffed page
    repeats its phrase as plain words. A page whose keyword is mostly notation has both rules
    waived; otherwise each rule's value is scaled by the share of the keyword's occurrences
    outside notation, as the n-gram rules are measured on the text without its notation. On
    Chinese and Japanese pages the values are first measured again with words counted by
    characters.
    """
    names = [r.name for r in RULES]
    cols = [names.index("keyword"), names.index("keyword_density")]
    rows = np.flatnonzero(matrix[:, cols].max(axis=1) >= 0.5)
    if len(rows) == 0:
        return
    missing = np.array([i for i in rows if int(i) not in keywords], dtype=np.int64)
    if len(missing):
        extra = _keyword_frame(texts, tok, words["keyword_index"], missing)
        keywords.update(zip(extra["row"].to_list(), extra["kw"].to_list(), strict=True))
    by_name = {r.name: r for r in RULES}
    for i in rows:
        kw, text = keywords.get(int(i)), texts[int(i)]
        if not kw or text is None:
            continue
        share = notation_share(text, kw)
        if share >= NOTATION_SHARE:
            matrix[i, cols] = 0.0
            continue
        if has_cjk(text):
            measured = {
                "keyword": spaced_phrase_share(text, kw, SHORT_PHRASE),
                "keyword_density": spaced_density(text, kw),
            }
        else:
            measured = {name: float(values[name][i]) for name in ("keyword", "keyword_density")}
        for col, (name, value) in zip(cols, measured.items(), strict=True):
            if value * (1.0 - share) < by_name[name].threshold:
                matrix[i, col] = 0.0


def spam_signals(
    texts: pl.Series, tok: Tokens, lines: Callable[[], pl.DataFrame] | None = None
) -> SpamSignals:
    """Per-document spam score (max over rules), reason and rule key; also the raw values.

    `lines`: returns `line_stats(texts)`, e.g. a future's result computed in another thread;
    it is called only after the word statistics, so the two overlap.
    """
    words = _word_stats(tok, texts)
    kw_share, keywords = _keyword_fragments(texts, tok, words)
    doorway = _doorway(texts, tok, words, keywords)
    line_table = lines() if lines is not None else line_stats(texts)
    values = _rule_values(words, kw_share, doorway, line_table)
    matrix = _rule_matrix(values, words["n_words"])
    _remeasure_prose(matrix, values, texts)
    _waive_for_licences(matrix, texts)
    _waive_for_notation(matrix, values, texts, tok, words, keywords)
    best = matrix.argmax(axis=1)
    score = matrix.max(axis=1)
    reasons = [""] * len(score)
    rules = [""] * len(score)
    flagged = np.flatnonzero(score >= 0.5)
    urls = line_table["urls"].to_numpy()
    # The keyword of every flagged page, also of short pages the phrase check skipped (their
    # density rule still fires, damped): a reason never names an empty keyword.
    missing = np.array([i for i in flagged if int(i) not in keywords], dtype=np.int64)
    if len(missing):
        extra = _keyword_frame(texts, tok, words["keyword_index"], missing)
        keywords.update(zip(extra["row"].to_list(), extra["kw"].to_list(), strict=True))
    for i in flagged:
        rule = RULES[best[i]]
        ratio = float(values[rule.name][i])
        kw = excerpt(keywords.get(int(i)) or "", 30)
        reasons[i] = _describe(rule, ratio).format(
            v=f"{100 * ratio:.0f}%", kw=kw, links=int(urls[i])
        )
        rules[i] = rule.name
    return SpamSignals(score, reasons, rules, values)
