"""The clean control: when the data side has nothing to name, and what is left unexplained.

A verdict is worth trusting only if it also says "not the data" when the data is not to blame. A
restart plan that skips clean data costs the run data and fixes nothing, so the spike pipeline
names no data culprit, writes no skip ranges and no block list, and says that the data looks
like the baseline when both of these hold:

- no group is dirty (flagged far more often than its background: cluster/verdict.py), outside a
  culprit;
- no group's over-representation is unexplained: a source group significantly more common in the
  window than in the baseline (or than the window's blend says, across a mixture switch; new in
  the window counts, where the blend gives it no share), that no scorer flags. The scorers know
  mojibake, template spam and repeated n-grams; a group that changed and that none of them flags
  could still be dirt they were not built for (another tokenizer's ids, numeric dumps), which the
  model's view sees (`--checkpoint`). Such a group is listed as "unexplained: the model could
  tell", never blamed on the data side alone.

Only source groups are listed: a source is what an engineer can look up and rescore; an
embedding cluster over-represented without dirt is one of the window's topics.
"""

from __future__ import annotations

import polars as pl

from forensics.cluster.baseline_fit import dirty_in_window
from forensics.cluster.sample import SampleDesign
from forensics.cluster.source import estimated_flagged, prepare_docs
from forensics.cluster.verdict import P_MAX
from forensics.score import FLAG_THRESHOLD


def unexplained_groups(ranked: pl.DataFrame) -> pl.DataFrame:
    """Source groups over-represented (against the baseline, or against the blend where it
    stands in for the baseline: a new group the blend gives no share is then tested against the
    baseline, and qualifies when significant) that no scorer flags, outside any culprit;
    sorted by window share, largest first."""
    needed = {"over_represented", "dirty", "kind", "verdict", "explained_by"}
    if ranked.height == 0 or not needed <= set(ranked.columns):
        return ranked.head(0)
    return ranked.filter(
        (pl.col("kind") == "source")
        & ~pl.col("dirty")
        & (pl.col("verdict") != "culprit")
        & pl.col("explained_by").is_null()
        & pl.col("over_represented")
    ).sort(["window_share", "id"], descending=[True, False])


def new_unchecked(ranked: pl.DataFrame) -> pl.DataFrame:
    """Source groups new in the window (significantly: the baseline test's p < P_MAX) whose
    share the blend explains and that no scorer flags: not evidence against the data, but
    content only the model's view can check. Outside any culprit, largest first."""
    needed = {"new_in_window", "dirty", "kind", "verdict", "explained_by", "p_value"}
    if ranked.height == 0 or not needed <= set(ranked.columns):
        return ranked.head(0)
    return ranked.filter(
        (pl.col("kind") == "source")
        & pl.col("new_in_window")
        & (pl.col("p_value") < P_MAX)
        & ~pl.col("dirty")
        & ~pl.col("over_represented")
        & (pl.col("verdict") != "culprit")
        & pl.col("explained_by").is_null()
    ).sort(["window_share", "id"], descending=[True, False])


def looks_like_baseline(ranked: pl.DataFrame) -> bool:
    """The clean control's verdict: no culprit, no dirty group outside a culprit, and no
    unexplained over-representation."""
    if ranked.height and "verdict" in ranked.columns:
        if ranked.filter(pl.col("verdict") == "culprit").height:
            return False
    return dirty_in_window(ranked).height == 0 and unexplained_groups(ranked).height == 0


def flagged_rates(
    window_docs: pl.DataFrame, baseline_docs: pl.DataFrame, design: SampleDesign | None = None
) -> dict[str, float]:
    """The figures the clean control quotes: each side's flagged share (garbage or spam score
    >= the scorer's threshold) and document count. `design`: the documents were sampled (the
    share is then estimated as the source clusters estimate it: forensics.cluster.source)."""

    def rate(docs: pl.DataFrame) -> float:
        if docs.height == 0 or "garbage_score" not in docs.columns:
            return 0.0
        if design is not None:
            prepared = prepare_docs(docs, "documents", text=False, scores=False)
            return estimated_flagged(prepared, design) / docs.height
        flagged = (pl.col("garbage_score").fill_null(0) >= FLAG_THRESHOLD) | (
            pl.col("spam_score").fill_null(0) >= FLAG_THRESHOLD
        )
        return float(docs.select(flagged.mean()).item() or 0.0)

    return {
        "window_flagged_rate": rate(window_docs),
        "baseline_flagged_rate": rate(baseline_docs),
        "window_docs": float(window_docs.height),
        "baseline_docs": float(baseline_docs.height),
    }
