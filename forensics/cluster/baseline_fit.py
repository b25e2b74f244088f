"""Verdicts that fit the baseline actually available.

`assign_verdicts` compares the window with a baseline window. That comparison misleads in three
cases, each handled here after it, on the ranked table:

- a mixture switch lies between baseline and window: every group of a dataset that joined at the
  switch is "new in the window" for the blend's sake, not because something went wrong. Being
  new is then no evidence: a new group is judged by its dirtiness and its density alone;
- a new group that is not dirty is "new, clean" (verdict clean), never an amber suspect;
- a baseline too small to judge (a run clamped at iteration 1, a short HF run whose shuffle
  buffer let the culprit in early): over-representation cannot be measured, so a dirty group is
  blamed on its dirtiness and on its density over the window's iterations (a burst before the
  spike), never exonerated for not being over-represented.

Where the run config gives mixture weights, the baseline's comparison is replaced in those cases
by one with the window's own blend (expected.py): over-represented = more common than the blend
of the window's data stage says it should be.

Every row gets `label` (what the report shows: culprit, suspect, "new, clean", clean), its
presence over the window's iterations (presence.py: `density`, `iterations_with`, `peak_share`,
`peak_iteration`, `sample_share`) and its expected share (expected.py: `expected_share`,
`blend_ratio`, `blend_p_value`, `blend_stages`); the context is described by `BaselineFit.notes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import polars as pl

from forensics.cluster.expected import expected_shares
from forensics.cluster.presence import PresenceMemo, window_presence
from forensics.cluster.verdict import (
    MIN_ENRICHMENT,
    P_MAX,
    assign_verdicts,
    baseline_rule,
    window_dirty_rule,
)

if TYPE_CHECKING:
    from forensics.cluster.expected import Blend

# Fewer baseline documents than this (or than BASELINE_MIN_RATIO x the window's) cannot show
# that a group is over-represented: a 1% group expects under 2 documents in 150.
MIN_BASELINE_DOCS = 150
BASELINE_MIN_RATIO = 0.1
# How many times its fair share of a group's samples the last quarter of the window's iterations
# (presence.BURST_TAIL) must hold to be a burst.
BURST_FACTOR = 2.0
NEW_CLEAN = "new, clean"


@dataclass
class BaselineFit:
    """What the baseline can say: a switch between it and the window, its size, and notes."""

    switch_between: list[int]
    baseline_docs: int
    window_docs: int
    notes: list[str] = field(default_factory=list)

    @property
    def too_small(self) -> bool:
        return self.baseline_docs < max(MIN_BASELINE_DOCS, BASELINE_MIN_RATIO * self.window_docs)


def describe_fit(
    window: tuple[int, int], baseline: tuple[int, int], starts: list[int], nb: int, nw: int
) -> BaselineFit:
    """The fit of a baseline to a window: stage starts after the baseline and up to the window's
    last iteration, and whether the baseline is big enough to judge over-representation."""
    between = [s for s in starts if baseline[1] < s <= window[1]]
    fit = BaselineFit(between, nb, nw)
    if between:
        fit.notes.append(
            f"a mixture switch (iteration {between[0]}) lies between the baseline and the spike: "
            "groups new in the window are judged by their dirtiness and density, not by being new"
        )
    if fit.too_small:
        fit.notes.append(
            f"the baseline is too small to judge ({nb:,} documents against the window's "
            f"{nw:,}): the verdict rests on dirtiness and density over the window's iterations"
        )
    return fit


def fitted_verdicts(
    clusters: pl.DataFrame,
    fit: BaselineFit,
    window_docs: pl.DataFrame,
    replay: pl.DataFrame,
    window: tuple[int, int],
    blend: Blend | None = None,
    presence_memo: PresenceMemo | None = None,
) -> pl.DataFrame:
    """assign_verdicts for the baseline at hand, then the labels (see the module docstring).

    When the baseline cannot show over-representation, something else counts in its place: with a
    switch between it and the window, being new in the window or bursting before the spike; with
    a baseline too small to judge, nothing is asked beyond the dirt (its density is reported).
    In both cases a group whose expected share the blend gives is over-represented when it is
    more common than that, and the baseline test no longer counts for it.
    Nesting then names the most specific group, as always.
    A new group that is not dirty is "new, clean" (verdict clean), never a suspect.
    `presence_memo`: the clusters' presence computed by an earlier call, reused
    (forensics.cluster.presence.PresenceMemo).
    """
    if clusters.height:
        presence = window_presence(clusters, window_docs, replay, window, presence_memo)
        clusters = clusters.join(presence, on="id")
        clusters = clusters.join(expected_shares(clusters, blend), on="id")
    # Stand-in evidence for dirty groups only: a clean group is never made a suspect by it. The
    # dirt that stands in is the window's own (dirtier than the rest of the window): a baseline
    # that cannot judge shares cannot give the background rate either, and a group dirtier than
    # the baseline may be all of the window's data (a run's only dataset), not a part of it.
    evidence, represented = None, None
    if fit.too_small:  # nothing to compare with: the dirt decides (nesting names the group)
        evidence = window_dirty_rule()
    elif fit.switch_between:
        burst = pl.col("new_in_window") | (pl.col("density") >= BURST_FACTOR)
        evidence = window_dirty_rule() & burst
    if evidence is not None and blend is not None:
        over_blend = (pl.col("blend_ratio") >= MIN_ENRICHMENT) & (pl.col("blend_p_value") < P_MAX)
        represented = (
            pl.when(pl.col("expected_share").is_not_null())
            .then(over_blend.fill_null(False))
            .otherwise(baseline_rule())
        )
    ranked = assign_verdicts(clusters, evidence, represented)
    if ranked.height == 0:
        return ranked.with_columns(pl.lit(None, dtype=pl.Utf8).alias("label"))
    clean_new = pl.col("new_in_window") & ~pl.col("dirty") & (pl.col("verdict") != "culprit")
    return ranked.with_columns(
        pl.when(clean_new).then(pl.lit("clean")).otherwise(pl.col("verdict")).alias("verdict"),
        pl.when(clean_new).then(pl.lit(NEW_CLEAN)).otherwise(pl.col("verdict")).alias("label"),
    )


def dirty_in_window(ranked: pl.DataFrame) -> pl.DataFrame:
    """Dirty groups of the window not inside a culprit: the spike is "likely numerical" only
    when there are none."""
    if ranked.height == 0 or "dirty" not in ranked.columns:
        return ranked.head(0)
    return ranked.filter(pl.col("dirty") & pl.col("explained_by").is_null())
