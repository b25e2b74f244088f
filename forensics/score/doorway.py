"""Doorway pages: one keyword forced into many unrelated sentence frames.

Why: a doorway page is real prose (copied sentences) with the product keyword pushed into every
sentence ("The file is read by cheap running shoes the parser."). Its keyword is only a few
percent of the words and rarely in short phrases, so keyword density and keyword-phrase rules
miss it (measured: 80% recall). Two things tell it apart:

- coverage: the page's top content word sits in nearly every sentence (>= 75% of >= 8
  sentences). Prose names its topic in some sentences, not in all;
- frames vary: the keyword appears at many different word positions. Legitimate reference
  material where one word recurs in every line (a type name in a function table, "symbol" in
  a generated symbol list, "Removed" in a changelog) has it at the same place in a repeated
  line frame, so the distinct positions are few.

Computed in polars for the documents whose top content word is at least 2% of words.
"""

from __future__ import annotations

import numpy as np
import polars as pl

# Sentences: runs ending at . ! ? or a line break.
SENTENCE = r"[^.!?\n]+"
MIN_SENTENCE_WORDS = 5
MIN_SENTENCES = 8
MIN_KEYWORD_SHARE = 0.02
# Distinct keyword positions (word index within its sentence) per sentence that has it: random
# insertion gives ~0.6-0.9; a fixed line frame under 0.25.
MIN_POSITION_SPREAD = 0.35


class DoorwayFrames:
    """Rule `doorway`: share of a page's sentences that carry its keyword, in varied frames.

    `values(keywords)` takes a frame with columns `row`, `text`, `kw` (the page's top content
    word, lowercased) and returns `row`, `doorway` (the share, 0 when the frames do not vary),
    `sentences`, `spread`.
    """

    key = "doorway"
    describe = "doorway page: '{kw}' forced into {v} of sentences, at varied positions"

    def values(self, keywords: pl.DataFrame) -> pl.DataFrame:
        sent = (
            keywords.lazy()
            .select("row", "kw", s=pl.col("text").str.to_lowercase().str.extract_all(SENTENCE))
            .explode("s")
            .with_row_index("sid")
            .with_columns(w=pl.col("s").str.extract_all(r"\w+"))
            .filter(pl.col("w").list.len() >= MIN_SENTENCE_WORDS)
        )
        hits = (
            sent.select("row", "sid", "kw", "w")
            .explode("w")
            .with_columns(pos=pl.int_range(pl.len()).over("sid"))
            .filter(pl.col("w") == pl.col("kw"))
            .group_by("row", "sid")
            .agg(pos=pl.col("pos").first())
            .group_by("row")
            .agg(hits=pl.len(), positions=pl.col("pos").n_unique())
        )
        per_doc = (
            sent.group_by("row")
            .agg(sentences=pl.len())
            .join(hits, on="row", how="left")
            .with_columns(pl.col("hits", "positions").fill_null(0))
            .with_columns(spread=pl.col("positions") / pl.col("hits").clip(lower_bound=1))
            .with_columns(
                doorway=pl.when(
                    (pl.col("sentences") >= MIN_SENTENCES)
                    & (pl.col("spread") >= MIN_POSITION_SPREAD)
                )
                .then(pl.col("hits") / pl.col("sentences"))
                .otherwise(0.0)
            )
            .collect()
        )
        return per_doc.select("row", "doorway", "sentences", "spread")

    def scores(self, n_docs: int, keywords: pl.DataFrame) -> np.ndarray:
        """The rule's value per document (0 for documents not in `keywords`)."""
        out = np.zeros(n_docs)
        if keywords.height == 0:
            return out
        v = self.values(keywords)
        out[v["row"].to_numpy()] = v["doorway"].to_numpy()
        return out
