"""Where each cluster sits in the window's iterations: its density, its peak, its sample share.

Cluster statistics (stats.py) count distinct documents; an engineer reading a spike also wants
to know when the group was drawn: spread evenly over the window, or a burst just before the
spike ("in 12 of 300 iterations, up to 21% of a step at iteration 2187"). And the blend speaks
in samples, not documents, so the comparison with expected shares (expected.py) needs each
cluster's share of the window's samples.

Input tables: the ranked clusters (`id`, `members`: 0-based rows of `window_docs`), the window's
documents (`dataset`, `doc_id`, in the order `members` refers to) and the window's replay rows
(one per iteration x sample x document segment: `iteration`, `dataset`, `doc_id`, and where the
family has them `sample_index`, `token_start`, `token_end`).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from forensics.cluster.positions import positions_in

# The last part of the window (a quarter of its iterations) in which a burst is looked for.
BURST_TAIL = 0.25
SLICE_MEMBERS = 2_000_000  # cluster members whose segments are joined and sorted at once

PRESENCE_COLUMNS = {
    "density": pl.Float64,  # tail share of its samples / the tail's share of the iterations
    "iterations_with": pl.Int64,  # window iterations drawing at least one of its documents
    "peak_share": pl.Float64,  # the largest share of one iteration's samples holding them
    "peak_iteration": pl.Int64,  # the (first) iteration where that peak is
    "sample_share": pl.Float64,  # its share of the window's samples (a sample split by tokens)
}


def weighted_segments(rows: pl.DataFrame) -> pl.DataFrame:
    """The replay rows with `_sample` (the sample a segment belongs to) and `weight` (its part
    of that sample: its tokens over the sample's, or an equal part when the family leaves token
    ranges open), so that the weights of one sample sum to 1."""
    sample = "sample_index" if "sample_index" in rows.columns else None
    out = rows.with_columns(
        (pl.col(sample) if sample else pl.int_range(pl.len())).cast(pl.Int64).alias("_sample")
    )
    if "token_start" in out.columns and "token_end" in out.columns:
        tokens = (pl.col("token_end") - pl.col("token_start")).cast(pl.Float64)
    else:
        tokens = pl.lit(None, dtype=pl.Float64)
    out = out.with_columns(tokens.alias("_tokens"))
    per = pl.col("_tokens").sum().over("iteration", "_sample")
    equal = 1.0 / pl.len().over("iteration", "_sample")
    return out.with_columns(
        pl.when(pl.col("_tokens").is_null().any().over("iteration", "_sample") | (per <= 0))
        .then(equal)
        .otherwise(pl.col("_tokens") / per)
        .alias("weight")
    )


def _member_rows(window_docs: pl.DataFrame, segments: pl.DataFrame) -> pl.DataFrame:
    """member (the document's row in `window_docs`, found by `positions_in`), iteration,
    _sample, weight: every window segment of a window document."""
    member = positions_in(window_docs, segments.select("dataset", "doc_id"))
    seen = segments.select("iteration", "_sample", "weight").with_columns(
        pl.Series("member", member)
    )
    return seen.filter(pl.col("member") >= 0).select(
        pl.col("member").cast(pl.UInt32), "iteration", "_sample", "weight"
    )


def _member_segments(ranked: pl.DataFrame, seen: pl.DataFrame) -> pl.DataFrame:
    """id, member, iteration, _sample, weight: every window segment of every cluster's
    documents (`seen`: `_member_rows`)."""
    members = (
        ranked.select("id", "members")
        .explode("members")
        .drop_nulls("members")
        .select("id", pl.col("members").cast(pl.UInt32).alias("member"))
    )
    return members.join(seen, on="member").select("id", "member", "iteration", "_sample", "weight")


def _cluster_slices(ranked: pl.DataFrame) -> list[pl.DataFrame]:
    """`ranked` in consecutive slices of about SLICE_MEMBERS members each (at least one
    cluster each)."""
    members = SLICE_MEMBERS
    sizes = ranked["members"].list.len().fill_null(0).to_numpy()
    slices, start, total = [], 0, 0
    for i, size in enumerate(sizes):
        if total and total + int(size) > members:
            slices.append(ranked.slice(start, i - start))
            start, total = i, 0
        total += int(size)
    slices.append(ranked.slice(start, len(sizes) - start))
    return slices


@dataclass
class PresenceMemo:
    """Clusters' presence already computed, for a caller that asks again over the same replay
    rows and documents (the evidence passes' rounds judge the same groups each round). A
    cluster's figures depend only on its members and the rows, so a row is reused where the
    id, the members and the inputs' fingerprint all match."""

    fingerprint: int | None = None
    known: pl.DataFrame | None = None  # id, _members, PRESENCE_COLUMNS


def window_presence(
    ranked: pl.DataFrame,
    window_docs: pl.DataFrame,
    rows: pl.DataFrame,
    window: tuple[int, int],
    memo: PresenceMemo | None = None,
) -> pl.DataFrame:
    """`id` plus PRESENCE_COLUMNS, one row per cluster of `ranked` (zeros and nulls for a
    cluster the replay rows never show); `memo`: figures computed before, reused (PresenceMemo)."""
    if memo is None:
        return _window_presence(ranked, window_docs, rows, window)
    fingerprint = hash((
        window, window_docs.height, rows.height,
        int(window_docs.select("dataset", "doc_id").hash_rows().sum()),
        int(rows.hash_rows().sum()),
    ))  # fmt: skip
    keyed = ranked.select("id", pl.col("members").hash().alias("_members"))
    if memo.fingerprint != fingerprint:
        memo.fingerprint, memo.known = fingerprint, None
    reused, todo = None, keyed
    if memo.known is not None:
        reused = keyed.join(memo.known, on=["id", "_members"], how="inner")
        todo = keyed.join(reused.select("id"), on="id", how="anti")
    if todo.height or reused is None:
        subset = ranked.join(todo.select("id"), on="id", how="semi")
        fresh = todo.join(_window_presence(subset, window_docs, rows, window), on="id")
        memo.known = fresh if memo.known is None else pl.concat([memo.known, fresh])
        reused = fresh if reused is None else pl.concat([reused, fresh])
    return ranked.select("id").join(reused.drop("_members"), on="id", how="left")


def _window_presence(
    ranked: pl.DataFrame, window_docs: pl.DataFrame, rows: pl.DataFrame, window: tuple[int, int]
) -> pl.DataFrame:
    """`window_presence` computed."""
    first, last = window
    tail_start = last - max(1, round(BURST_TAIL * (last - first + 1))) + 1
    tail_share = (last - tail_start + 1) / (last - first + 1)
    segments = weighted_segments(rows)
    samples = segments.select("iteration", "_sample").unique()
    per_iteration = samples.group_by("iteration").agg(pl.len().alias("_n"))
    seen = _member_rows(window_docs, segments)
    del segments
    # A cluster's figures come from its own segments alone: computed a slice of clusters at a
    # time, so that no table holds every (cluster, segment) pair of the window at once.
    per = pl.concat(
        [
            _slice_presence(part, seen, per_iteration, samples.height, tail_start, tail_share)
            for part in _cluster_slices(ranked)
        ]
    )
    out = ranked.select("id").join(per, on="id", how="left")
    return out.with_columns(
        pl.col("density").fill_null(0.0),
        pl.col("iterations_with").fill_null(0),
        pl.col("peak_share").fill_null(0.0),
        pl.col("sample_share").fill_null(0.0),
    ).select("id", *[pl.col(c).cast(t) for c, t in PRESENCE_COLUMNS.items()])


def _in_order_sum(column: str) -> pl.Expr:
    """The sum of `column` added term by term in row order (a running sum's last value): a
    plain sum of a frame's only group takes a vectorised path that adds in another order, so
    the last bits of a figure would depend on which other clusters share its slice."""
    return pl.col(column).cum_sum().last().alias(column)


def _slice_presence(
    ranked: pl.DataFrame,
    seen: pl.DataFrame,
    per_iteration: pl.DataFrame,
    n_samples: int,
    tail_start: int,
    tail_share: float,
) -> pl.DataFrame:
    """id and the presence figures of the clusters of `ranked` that the window's rows show."""
    hits = _member_segments(ranked, seen)
    # Sorted and grouped in order, so every float sum adds its terms in the same order on every
    # run (a parallel group_by would leave the last bits of the shares to the thread schedule).
    sampled = (
        hits.sort(hits.columns)
        .group_by("id", "iteration", "_sample", maintain_order=True)
        .agg(_in_order_sum("weight"))
    )
    steps = (
        sampled.group_by("id", "iteration", maintain_order=True)
        .agg(pl.len().alias("_hit"), _in_order_sum("weight"))
        .join(per_iteration, on="iteration")
        .with_columns((pl.col("_hit") / pl.col("_n")).alias("_share"))
        .sort("id", "_share", "iteration", descending=[False, True, False])
    )
    # The divisions are numpy's, element by element: polars divides a column of several rows
    # by a constant through its reciprocal and a column of one row exactly, so the last bits
    # of a cluster's figures would depend on how many clusters share its slice.
    per = steps.group_by("id", maintain_order=True).agg(
        pl.len().cast(pl.Int64).alias("iterations_with"),
        pl.col("_share").first().alias("peak_share"),
        pl.col("iteration").first().cast(pl.Int64).alias("peak_iteration"),
        pl.col("_hit").filter(pl.col("iteration") >= tail_start).sum().alias("_tail"),
        pl.col("_hit").sum().alias("_hits"),
        _in_order_sum("weight"),
    )
    tail, hits_all = per["_tail"].to_numpy(), per["_hits"].to_numpy()
    return per.select("id", "iterations_with", "peak_share", "peak_iteration").with_columns(
        pl.Series("density", tail / hits_all / tail_share, dtype=pl.Float64),
        pl.Series("sample_share", per["weight"].to_numpy() / max(n_samples, 1), dtype=pl.Float64),
    )
