"""Doorway pages: one commercial phrase spliced into many unrelated sentence frames.

Why: a doorway page is real prose (copied sentences) with the product phrase pushed into every
sentence ("The file is read by cheap running shoes the parser."). Its keyword is only a few
percent of the words and rarely in short phrases, so keyword density and keyword-phrase rules
miss it. Three things together tell it apart:

- coverage: the page's top content word sits in nearly every sentence (>= 80% of >= 8
  sentences, the rule's threshold in `spam.RULES`);
- frames vary: the keyword appears at many different word positions. Generated reference
  material where one word recurs in every line (a type name in a function table, "symbol" in
  a generated symbol list, "Removed" in a changelog) has it at the same place in a repeated
  line frame, so the distinct positions are few;
- the keyword travels as one spliced phrase: in nearly every sentence it has the same content
  word beside it ("running" always next to "shoes"), because the whole phrase was pasted in as
  a block. Coverage and varied positions alone also describe a reference page: the page for a
  command or an SQL statement names its subject ("table", "database", the command) in 80-90% of
  its sentences, at varied positions, because its sentences are about it; but there the word
  sits in changing company ("the table", "CREATE TABLE", "table constraint", "each table"),
  since each sentence says something different about it.

Vietnamese writes a space between the syllables of a word: "tiến trình" (process) is one word
of two syllables, so the page about processes has "tiến" beside "trình" in every sentence, as a
pasted phrase would. On a page written in Vietnamese (at least `MIN_VIETNAMESE_WORDS` of its
words carry a letter only Vietnamese uses) the keyword's company is two words on a side, or one
on each side, unless the keyword and its neighbour are both plain ASCII (an English product
phrase spliced into Vietnamese frames is still a phrase of words).

Computed in polars for the documents whose top content word is at least 2% of words.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from forensics.score.tokens import STOPWORDS

# Sentences: runs ending at a line break, or at . ! ? followed by white space (or the end). A
# period inside a token is not a sentence end: reference sentences carry versions ("2.2.8"),
# file names ("polls.tar.gz"), dotted paths ("django.db.models") and addresses, and cutting them
# there turns one sentence into several short pieces without the keyword.
SENTENCE = r"(?:[^.!?\n]|[.!?]+[^.!?\s])+"
# The same ends, with the blank lines after them (one end per break), counted by
# `spam._doorway`'s cheap pre-check.
SENTENCE_END = r"(?:[.!?]+(?:\s|$)|\n)\s*"
MIN_SENTENCE_WORDS = 5
MIN_SENTENCES = 8
MIN_KEYWORD_SHARE = 0.02
# Distinct keyword positions (word index within its sentence) per sentence that has it: random
# insertion gives ~0.6-0.9; a fixed line frame under 0.25.
MIN_POSITION_SPREAD = 0.35
# Share of the keyword's sentences in which one and the same content word stands right before
# it, or one and the same right after it: a pasted phrase gives ~1.0 (its other word is always
# there); a reference page's subject keeps changing company (well under half).
MIN_PHRASE_SHARE = 0.75
# Letters only Vietnamese uses: the horned o and u and the Latin Extended Additional block (a dot
# below, a hook above, a circumflex or breve with a tone mark). Not ă or đ: Romanian and
# Croatian write them. Measured on the reference set's clean pages: Vietnamese pages have
# 7.5-61% of their words with one, every other language 0%.
VIETNAMESE_LETTER = r"[ơưƠƯ\x{1EA0}-\x{1EF9}]"
VIETNAMESE_WORD = rf"\w*{VIETNAMESE_LETTER}\w*"
MIN_VIETNAMESE_WORDS = 0.05
ASCII_WORD = r"^[\x00-\x7f]*$"


def _keyword_hits(keywords: pl.DataFrame) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """(sentences, hits): `row`, `sid` of every sentence of >= MIN_SENTENCE_WORDS words, and
    every occurrence of the keyword in them: `row`, `sid`, `pos` (word index), `left`, `right`,
    `across` (its company, `_company`; null at the sentence's edges)."""
    # Words are counted only on the pages that hold a Vietnamese letter at all (a cheap scan).
    vietnamese = (
        keywords.lazy()
        .filter(pl.col("text").str.contains(VIETNAMESE_LETTER))
        .select(
            "row",
            vi=pl.col("text").str.count_matches(VIETNAMESE_WORD)
            >= MIN_VIETNAMESE_WORDS * pl.col("text").str.count_matches(r"\w+"),
        )
    )
    sent = (
        keywords.lazy()
        .join(vietnamese, on="row", how="left")
        .select(
            "row",
            "kw",
            vi=pl.col("vi").fill_null(False),
            s=pl.col("text").str.to_lowercase().str.extract_all(SENTENCE),
        )
        .explode("s")
        .with_row_index("sid")
        .filter(pl.col("s").str.count_matches(r"\w+") >= MIN_SENTENCE_WORDS)
    )
    same_before = pl.col("sid").shift(1) == pl.col("sid")
    same_after = pl.col("sid").shift(-1) == pl.col("sid")
    two_before = pl.col("sid").shift(2) == pl.col("sid")
    two_after = pl.col("sid").shift(-2) == pl.col("sid")
    hits = (
        # Only the sentences that hold the keyword's letters are split into words.
        sent.filter(pl.col("s").str.contains(pl.col("kw"), literal=True))
        .select("row", "sid", "kw", "vi", w=pl.col("s").str.extract_all(r"\w+"))
        .explode("w")
        .with_columns(
            pos=pl.int_range(pl.len()).over("sid"),
            left=pl.when(same_before).then(pl.col("w").shift(1)),
            right=pl.when(same_after).then(pl.col("w").shift(-1)),
            left2=pl.when(two_before).then(pl.col("w").shift(2)),
            right2=pl.when(two_after).then(pl.col("w").shift(-2)),
        )
        .filter(pl.col("w") == pl.col("kw"))
        .collect()
    )
    # Other pages' company is one word a side; only Vietnamese pages' hits pay for more.
    plain = hits.filter(~pl.col("vi")).select(
        "row", "sid", "pos", "left", "right", across=pl.lit(None, pl.String)
    )
    vietnamese = hits.filter(pl.col("vi")).select("row", "sid", "pos", **_company())
    return sent.select("row", "sid"), pl.concat([plain, vietnamese]).lazy()


def _company() -> dict[str, pl.Expr]:
    """`left`, `right` and `across`: the keyword's company on a Vietnamese page, as the rule
    compares it. Two words on a side (the neighbour may be the other syllable of the keyword's
    own word), unless keyword and neighbour are plain ASCII (then one, as on other pages), and
    the words on both sides (`across`), for a keyword inside a three-syllable phrase."""
    kw_ascii = pl.col("w").str.contains(ASCII_WORD)

    def side(near: str, far: str, outward_first: bool) -> tuple[pl.Expr, pl.Expr]:
        syllable = ~(kw_ascii & pl.col(near).str.contains(ASCII_WORD)).fill_null(False)
        pair = [far, near] if outward_first else [near, far]
        two = pl.concat_str([pl.col(c) for c in pair], separator=" ")
        return pl.when(syllable).then(two).otherwise(pl.col(near)), syllable

    left, left_syllable = side("left", "left2", outward_first=True)
    right, right_syllable = side("right", "right2", outward_first=False)
    across = pl.when(left_syllable | right_syllable).then(
        pl.concat_str([pl.col("left"), pl.col("right")], separator=" | ")
    )
    return {"left": left, "right": right, "across": across}


def _phrase_share(hits: pl.LazyFrame) -> pl.LazyFrame:
    """`row`, `phrase`: the most sentences in which the same company (not a stopword) stands on
    one side of the keyword or around it (at any of its occurrences there), as a count."""
    return (
        hits.unpivot(
            index=["row", "sid"],
            on=["left", "right", "across"],
            variable_name="side",
            value_name="nb",
        )
        .filter(pl.col("nb").is_not_null() & ~pl.col("nb").is_in(sorted(STOPWORDS)))
        .unique(["row", "sid", "side", "nb"])
        .group_by("row", "side", "nb")
        .agg(c=pl.len())
        .group_by("row")
        .agg(phrase=pl.col("c").max())
    )


class DoorwayFrames:
    """Rule `doorway`: share of a page's sentences that carry its keyword, in varied frames, as
    part of one spliced phrase.

    `values(keywords)` takes a frame with columns `row`, `text`, `kw` (the page's top content
    word, lowercased) and returns `row`, `doorway` (the share, 0 when the frames do not vary or
    the keyword is not one fixed phrase), `coverage` (the share, unconditionally),
    `sentences`, `spread`, `phrase` (the share of the keyword's sentences with the same
    neighbour on one side).
    """

    key = "doorway"
    describe = "doorway page: '{kw}' forced into {v} of sentences, at varied positions"

    def values(self, keywords: pl.DataFrame) -> pl.DataFrame:
        sent, hits = _keyword_hits(keywords)
        per_row = (
            hits.group_by("row", "sid")
            .agg(pl.col("pos").first())
            .group_by("row")
            .agg(hits=pl.len(), positions=pl.col("pos").n_unique())
        )
        per_doc = (
            sent.group_by("row")
            .agg(sentences=pl.len())
            .join(per_row, on="row", how="left")
            .join(_phrase_share(hits), on="row", how="left")
            .with_columns(pl.col("hits", "positions", "phrase").fill_null(0))
            .with_columns(
                spread=pl.col("positions") / pl.col("hits").clip(lower_bound=1),
                phrase=pl.col("phrase") / pl.col("hits").clip(lower_bound=1),
                coverage=pl.col("hits") / pl.col("sentences"),
            )
            .with_columns(
                doorway=pl.when(
                    (pl.col("sentences") >= MIN_SENTENCES)
                    & (pl.col("spread") >= MIN_POSITION_SPREAD)
                    & (pl.col("phrase") >= MIN_PHRASE_SHARE)
                )
                .then(pl.col("coverage"))
                .otherwise(0.0)
            )
            .collect()
        )
        return per_doc.select("row", "doorway", "coverage", "sentences", "spread", "phrase")

    def scores(self, n_docs: int, keywords: pl.DataFrame) -> np.ndarray:
        """The rule's value per document (0 for documents not in `keywords`)."""
        out = np.zeros(n_docs)
        if keywords.height == 0:
            return out
        v = self.values(keywords)
        out[v["row"].to_numpy()] = v["doorway"].to_numpy()
        return out
