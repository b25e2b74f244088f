"""The culprit's exposure: where it first appears in the window, and how much of the rest of the
run it is in (forward exposure), which decides whether skipping can avoid it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from forensics.pipeline import cache_key, cached_table
from forensics.spike.blame import documents_by_dataset

AHEAD_TOP = 10  # densest iterations ahead listed in the report
EXPOSURE_SCHEMA = {"iteration": pl.Int64, "samples": pl.Int64, "flagged_samples": pl.Int64}


def ahead_summary(ahead: pl.DataFrame, dense_share: float, top: int = AHEAD_TOP) -> dict[str, Any]:
    """Forward exposure: the culprit's share of the rest of the run and its densest iterations."""
    if ahead.height == 0:
        return {"iterations": 0, "share_of_remaining_samples": 0.0}
    shares = ahead.with_columns(
        (pl.col("flagged_samples") / pl.col("samples")).alias("share")
    ).filter(pl.col("samples") > 0)
    total = int(shares["samples"].sum())
    flagged = int(shares["flagged_samples"].sum())
    dense = shares.filter(pl.col("share") >= dense_share)
    densest = shares.sort(["share", "iteration"], descending=[True, False]).head(top)
    return {
        "from_iteration": int(ahead["iteration"].min()),
        "to_iteration": int(ahead["iteration"].max()),
        "iterations": ahead.height,
        "iterations_holding_it": int((shares["flagged_samples"] > 0).sum()),
        "share_of_remaining_samples": flagged / total if total else 0.0,
        "dense_share": dense_share,
        "dense_iterations": dense.height,
        "densest": [
            [int(i), round(float(s), 4)] for i, s in densest.select("iteration", "share").rows()
        ],
    }


def ahead_advice(summary: dict[str, Any], no_skip: str | None = None) -> str:
    """One sentence: can skipping iterations avoid the culprit ahead, or must the data change?
    (`no_skip`: the run's trainer cannot skip at all, `Trainer.no_skip`, said instead.)"""
    share = summary.get("share_of_remaining_samples", 0.0)
    held = summary.get("iterations_holding_it", 0)
    n = summary.get("iterations", 0)
    if not n or held == 0:
        return "it does not occur again before the end of training"
    if no_skip:
        return (
            f"it is in {held:,} of the {n:,} remaining iterations ({100 * share:.2f}% of their "
            f"samples); {no_skip}"
        )
    if held / n > 0.5:
        return (
            f"it is in {held:,} of the {n:,} remaining iterations ({100 * share:.1f}% of their "
            "samples): skipping iterations cannot avoid it; remove its documents (block list in "
            "skip.json) and rebuild the index, or accept the rest"
        )
    return (
        f"it is in {held:,} of the {n:,} remaining iterations ({100 * share:.2f}% of their "
        "samples); --skip-ahead adds the densest of them to the skip ranges"
    )


def culprit_exposure(
    replayer: Any,
    culprit: pl.DataFrame,
    span: tuple[int, int],
    cache: Path,
    config_hash: str,
    docs_key: str,
    hits: dict[str, bool],
    name: str,
) -> pl.DataFrame:
    """Replayer.exposure for the culprit documents over `span`, cached."""
    key = cache_key(config=config_hash, docs=docs_key, span=span)
    docs = culprit.select("dataset", "doc_id").unique()
    return cached_table(
        cache / f"exposure-{key}.parquet",
        lambda: replayer.exposure(docs, span[0], span[1]),
        hits,
        f"exposure-{name}",
    )


def exposure_stage(
    run: Any, culprit: pl.DataFrame, resume_iteration: int, after: int = 0
) -> tuple[pl.DataFrame, pl.DataFrame, tuple[int, int]]:
    """The culprit's exposure in the skip scope (resume .. spike + `after`, --after) and ahead
    of it (to the end of training), and the scope itself."""

    last_it = run.replayer.last_iteration
    scope = (resume_iteration, min(run.step + after, last_it))
    docs_key = cache_key(docs=documents_by_dataset(culprit))
    args = (run.replayer, culprit)
    with run.clock.stage("exposure", f"culprit documents in {scope[0]}-{last_it}", spinner=True):
        exposure = culprit_exposure(
            *args, scope, run.cache, run.config_hash, docs_key, run.hits, "scope"
        )
        if scope[1] < last_it:
            ahead = culprit_exposure(
                *args, (scope[1] + 1, last_it), run.cache, run.config_hash, docs_key, run.hits,
                "ahead",
            )  # fmt: skip
        else:
            ahead = pl.DataFrame(schema=EXPOSURE_SCHEMA)
    return exposure, ahead, scope
