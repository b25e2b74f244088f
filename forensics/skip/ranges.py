"""Skip ranges as sets of iterations: merging, choosing them from the culprit's exposure, what
they cost, and the global samples they cover.

Iterations are 1-indexed and absolute (the numbers the training log prints); a range is an
inclusive pair. How a trainer is told to skip them is `forensics.skip.flags`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import polars as pl

from forensics.errors import ForensicsError

Range = tuple[int, int]  # inclusive, 1-indexed iterations

# -- ranges -------------------------------------------------------------------------------------


def merge_ranges(iterations: Iterable[int]) -> list[Range]:
    """Sorted, merged inclusive ranges covering exactly `iterations`."""
    out: list[list[int]] = []
    for it in sorted({int(i) for i in iterations}):
        if out and it == out[-1][1] + 1:
            out[-1][1] = it
        else:
            out.append([it, it])
    return [(a, b) for a, b in out]


def expand(ranges: Iterable[Sequence[int]]) -> list[int]:
    """All iterations of inclusive ranges, sorted and unique."""
    return sorted({i for a, b in ranges for i in range(int(a), int(b) + 1)})


# -- choosing and costing -----------------------------------------------------------------------


def check_threshold(threshold: float) -> None:
    """A culprit share threshold is in [0, 1): at 1 no iteration could ever be skipped."""
    if not 0.0 <= threshold < 1.0:
        raise ForensicsError(f"--threshold must be in [0, 1), got {threshold}")


def select_iterations(exposure: pl.DataFrame, threshold: float = 0.0) -> list[int]:
    """Iterations whose culprit share (flagged_samples / samples) exceeds `threshold`.

    `exposure` has iteration, samples, flagged_samples (Replayer.exposure); threshold 0 means any
    culprit sample at all.
    """
    check_threshold(threshold)
    chosen = exposure.filter(
        (pl.col("flagged_samples") > 0)
        & (pl.col("flagged_samples") > threshold * pl.col("samples"))
    )
    return chosen["iteration"].sort().to_list()


def collateral(exposure: pl.DataFrame, ranges: Sequence[Range]) -> dict[str, int | float]:
    """What the ranges cost and miss within the exposure table's iterations.

    clean_samples_skipped    samples in skipped iterations that hold no culprit document
    culprit_samples_missed   samples holding culprit documents in iterations not skipped
    """
    skipped = set(expand(ranges))
    marked = exposure.with_columns(pl.col("iteration").is_in(list(skipped)).alias("_skip"))
    sk = marked.filter(pl.col("_skip"))
    kept = marked.filter(~pl.col("_skip"))
    culprit_total = int(marked["flagged_samples"].sum() or 0)
    return {
        "iterations_skipped": sk.height,
        "samples_skipped": int(sk["samples"].sum() or 0),
        "clean_samples_skipped": int((sk["samples"] - sk["flagged_samples"]).sum() or 0),
        "culprit_samples_skipped": int(sk["flagged_samples"].sum() or 0),
        "culprit_samples_missed": int(kept["flagged_samples"].sum() or 0),
        "culprit_samples_total": culprit_total,
        "culprit_iterations_missed": int((kept["flagged_samples"] > 0).sum()),
    }


def sample_ranges(iteration_samples: pl.DataFrame, ranges: Sequence[Range]) -> list[list[int]]:
    """Half-open global sample ranges [first, end) of the skipped iterations, merged.

    `iteration_samples` has iteration, first_sample, end_sample (Replayer.iteration_samples).
    """
    skipped = set(expand(ranges))
    rows = (
        iteration_samples.filter(pl.col("iteration").is_in(list(skipped)))
        .sort("iteration")
        .select("first_sample", "end_sample")
        .rows()
    )
    out: list[list[int]] = []
    for first, end in rows:
        if out and out[-1][1] == first:
            out[-1][1] = end
        else:
            out.append([int(first), int(end)])
    return out
