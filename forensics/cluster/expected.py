"""Expected shares: what the run config's mixture says each source group should be of the window.

Why: the baseline comparison (stats.py) asks "is this group more common in the window than it
was before?". Across a mixture switch, or against a baseline too small to count in, that
question misleads: a dataset the new blend weighs at 25% is "new" and "enriched" by design. The
fair question is then "is it more common than the window's own blend says it should be?".

The expected share of a source group over the window's samples:

    expected(group) = sum over datasets d of  E_d x share_d(group)
    E_d             = sum over data stages s of  (window samples in s / window samples) x w_s(d)

w_s(d) is the weight stage s's blend gives dataset d (the replayer's `blend_shares`: Megatron's
blend weights as the greedy loop sees them, a streaming run's stream weights, OLMo-core's source
sizes); share_d(group) is 1 for the group "dataset=d", else the group's share of d's samples as
the replayer can tell it (`facet_shares`: Megatron's train-split tokens per manifest value), and
unknown otherwise. The observed share is the group's share of the window's samples
(presence.py: a sample split between its documents by tokens).

Over-represented against the blend: observed / expected >= MIN_ENRICHMENT and a one-sided
binomial test over the window's samples, Holm-corrected over the groups tested, p < P_MAX (the
same thresholds as the baseline test). Samples of one long document are not independent draws,
so the p-value is approximate; the ratio carries the size of the effect.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from forensics.cluster.source import MISSING_KEY
from forensics.cluster.stats import P_FLOOR, holm
from forensics.cluster.verdict import MIN_ENRICHMENT, P_MAX

EXPECTED_COLUMNS = {
    "expected_share": pl.Float64,  # of the window's samples, per the blend (null: unknown)
    "blend_ratio": pl.Float64,  # observed sample share / expected share
    "blend_p_value": pl.Float64,  # Holm-corrected binomial p of the excess over expected
    "blend_stages": pl.Utf8,  # the stages (1-based) whose blends the expectation comes from
}


@dataclass
class Blend:
    """The window's blend: each dataset's expected share of its samples, which stages it comes
    from (1-based, as data.stages lists them, with their first iterations), and notes."""

    shares: dict[str, float]
    stages: list[tuple[int, int]]  # (1-based stage number, first iteration)
    basis: str
    facet_shares: Any  # facet -> DataFrame(dataset, key, share) | None, the replayer's
    samples: int
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """ "stage 2" or "stages 1-2": the blends the expectation mixes."""
        numbers = [n for n, _ in self.stages]
        if len(numbers) == 1:
            return f"stage {numbers[0]}"
        return f"stages {numbers[0]}-{numbers[-1]}"


def window_blend(replayer: Any, rows: pl.DataFrame, starts: list[int]) -> Blend | None:
    """The blend of the window's replay rows (`stage`, `iteration`, `sample_index`), or None
    when the family has no mixture weights (then a note says so)."""
    if not replayer.mixture_weights or rows.height == 0 or "stage" not in rows.columns:
        return None
    sample = "sample_index" if "sample_index" in rows.columns else "position"
    per_stage = rows.select("stage", "iteration", sample).unique().group_by("stage").len()
    total = int(per_stage["len"].sum())
    shares: dict[str, float] = {}
    stages, basis = [], ""
    for stage, n in sorted(per_stage.iter_rows()):
        weights, basis = replayer.blend_shares(int(stage))
        for name, w in weights.items():
            shares[name] = shares.get(name, 0.0) + w * n / total
        first = starts[int(stage)] if int(stage) < len(starts) else 1
        stages.append((int(stage) + 1, first))
    return Blend(shares, stages, basis, replayer.facet_shares, total)


def no_blend_note(replayer: Any) -> str | None:
    """The note for a family whose config gives no mixture weights."""
    if replayer.mixture_weights:
        return None
    return (
        "this data family's config gives no mixture weights: expected shares are not computed, "
        "and groups are compared with the baseline only"
    )


def _group_expectation(blend: Blend, facet: str, keys: list[str]) -> dict[str, float | None]:
    """key -> expected share of the window's samples for the groups of one facet."""
    if facet == "dataset":
        return {k: blend.shares.get(k, 0.0) for k in keys}

    table = blend.facet_shares(facet)
    if table is None:
        return dict.fromkeys(keys)
    weights = pl.DataFrame(
        {"dataset": list(blend.shares), "_w": list(blend.shares.values())},
        schema={"dataset": pl.Utf8, "_w": pl.Float64},
    )
    per = (
        table.with_columns(pl.col("key").cast(pl.Utf8).fill_null(MISSING_KEY))
        .join(weights, on="dataset")
        .group_by("key")
        .agg((pl.col("share") * pl.col("_w")).sum().alias("expected"))
    )
    found = dict(per.iter_rows())
    return {k: found.get(k, 0.0) for k in keys}


def expected_shares(clusters: pl.DataFrame, blend: Blend | None) -> pl.DataFrame:
    """`id` plus EXPECTED_COLUMNS for every cluster (nulls for embedding clusters, and for
    groups whose share of their dataset the replayer cannot tell). `clusters` needs `id`,
    `kind`, `facet`, `key` and `sample_share` (presence.py)."""
    from scipy.stats import binom

    expected: list[float | None] = [None] * clusters.height
    if blend is not None:
        sources = clusters.with_row_index("_i").filter(pl.col("kind") == "source")
        for (facet,), part in sources.group_by("facet", maintain_order=True):
            found = _group_expectation(blend, str(facet), part["key"].to_list())
            for i, key in zip(part["_i"].to_list(), part["key"].to_list(), strict=True):
                expected[i] = found[key]
    exp = np.array([np.nan if e is None else e for e in expected], dtype=np.float64)
    observed = clusters["sample_share"].cast(pl.Float64).fill_null(0.0).to_numpy()
    known = np.isfinite(exp)
    n = blend.samples if blend is not None else 0
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(known, observed / exp, np.nan)
    p = np.full(exp.size, np.nan)
    if known.any():
        k = np.round(observed[known] * n)
        raw = binom.sf(k - 1, n, np.clip(exp[known], 0.0, 1.0))
        p[known] = np.maximum(holm(raw), P_FLOOR)
    label = blend.label if blend is not None else None
    return pl.DataFrame(
        {
            "id": clusters["id"],
            "expected_share": pl.Series(exp, dtype=pl.Float64).fill_nan(None),
            "blend_ratio": pl.Series(ratio, dtype=pl.Float64).fill_nan(None),
            "blend_p_value": pl.Series(p, dtype=pl.Float64).fill_nan(None),
            "blend_stages": pl.Series([label if ok else None for ok in known], dtype=pl.Utf8),
        }
    )


def blend_note(blend: Blend) -> str:
    """A note for the report: where the expected shares come from."""
    stages = ", ".join(f"stage {n} (from iteration {first})" for n, first in blend.stages)
    return (
        f"expected shares: the {blend.basis} of data {stages}, over the window's "
        f"{blend.samples:,} samples; a group is over-represented against it at observed / "
        f"expected >= {MIN_ENRICHMENT:g} (binomial over samples, Holm-corrected p < {P_MAX:g})"
    )
