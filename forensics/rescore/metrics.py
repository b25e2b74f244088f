"""Per-token losses -> per-sample and per-segment numbers, each as a z-score against the baseline.

Token loss t of a sample (t = 0..L-1) is the loss of predicting the sample's token t+1. A segment
occupying tokens [start, end) of the sample owns the losses whose *predicted* token lies in it:
t in [max(start, 1) - 1, end - 1). The segments of a sample tile 1..L, so their loss sums add up
to the sample's sum exactly (tests/forensics/rescore/test_rescore.py holds this). A segment of
one token at the sample's start predicts nothing and has no loss.

z-scores: (x - mean over the baseline's samples (or segments)) / their standard deviation
(ddof 1). Why z and not raw loss: a checkpoint's loss level depends on the model and the data mix;
what matters is how far the window's samples sit from what the same model does on the data
before the window.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from forensics.errors import ForensicsError

MIN_BASELINE = 8  # baseline samples needed for a z-score with a usable standard deviation


def sample_metrics(losses: np.ndarray) -> dict[str, np.ndarray]:
    """loss (mean), max_token_loss, peak_token (position in the sample of the worst token)."""
    peak = np.argmax(losses, axis=1)
    return {
        "loss": losses.mean(axis=1, dtype=np.float64),
        "max_token_loss": losses[np.arange(len(losses)), peak].astype(np.float64),
        "peak_token": (peak + 1).astype(np.int32),
    }


def segment_metrics(losses: np.ndarray, segments: pl.DataFrame) -> dict[str, np.ndarray]:
    """Per segment: loss_sum, tokens (losses it owns), loss (mean; NaN when it owns none),
    max_token_loss, peak_token (position in the sample). `segments`: row, start, end."""
    n, length = losses.shape
    row = segments["row"].to_numpy().astype(np.int64)
    lo = np.maximum(segments["start"].to_numpy().astype(np.int64), 1) - 1
    hi = segments["end"].to_numpy().astype(np.int64) - 1
    if row.size and (row.max() >= n or hi.max() > length):
        raise ForensicsError("segment table does not match the losses (rows or lengths differ)")
    count = np.maximum(hi - lo, 0)
    cum = np.zeros((n, length + 1), dtype=np.float64)
    np.cumsum(losses, axis=1, out=cum[:, 1:])
    total = cum[row, lo + count] - cum[row, lo]
    flat = losses.reshape(-1)
    nonempty = np.flatnonzero(count > 0)
    seg_max = np.full(len(row), np.nan)
    seg_peak = np.full(len(row), -1, dtype=np.int64)
    if nonempty.size:
        starts = row[nonempty] * length + lo[nonempty]
        seg_max[nonempty] = np.maximum.reduceat(flat, starts)
        # the peak's position: first index in each segment equal to its max
        ends = starts + count[nonempty]
        for i, (a, b) in enumerate(zip(starts, ends, strict=True)):  # small: capped samples
            seg_peak[nonempty[i]] = int(np.argmax(flat[a:b])) + lo[nonempty[i]] + 1
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return {
        "loss_sum": total,
        "tokens": count,
        "loss": mean,
        "max_token_loss": seg_max,
        "peak_token": seg_peak,
    }


def zscore(values: np.ndarray, baseline: np.ndarray, what: str) -> tuple[np.ndarray, float, float]:
    """(z of `values`, baseline mean, baseline sd) ignoring NaN; an error when the baseline is
    too small or constant (a z-score against it would be meaningless, not zero)."""
    base = baseline[np.isfinite(baseline)]
    if base.size < MIN_BASELINE:
        raise ForensicsError(
            f"{what}: the baseline has {base.size} scored values, at least {MIN_BASELINE} are "
            "needed for z-scores; widen the baseline or raise the sample cap"
        )
    mu, sd = float(base.mean()), float(base.std(ddof=1))
    if not sd > 0:
        raise ForensicsError(f"{what}: every baseline value is {mu:.4g}; no z-score is possible")
    return (values - mu) / sd, mu, sd
