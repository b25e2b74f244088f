"""What "normal" looks like for a loss curve: an EMA, a robust local level and noise, a power law.

Everything here is vectorised (polars rolling windows in Rust, numpy cumulative sums) because a
million-step log must be triaged in seconds. Steps may be irregular (log-interval > 1, gaps after
restarts): time constants are in steps (`ewm_mean_by`), robust windows are in rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

MAD_TO_SIGMA = 1.4826  # MAD of a normal distribution times this is its standard deviation


def ema_by_step(steps: np.ndarray, values: np.ndarray, half_life: float) -> np.ndarray:
    """EMA whose weight halves every `half_life` steps, whatever the logging interval, without
    start-up bias.

    y_t = sum_i w_i x_i / sum_i w_i over the points so far, w_i = 2^-((s_t - s_i) / half_life):
    the weights are normalised by what the history holds (pandas' `adjust=True`, the debiasing
    TensorBoard's smoothing and Adam's moment estimates apply). The recursion started at the
    first value (y_0 = x_0, polars' `ewm_mean_by`) gives that first point the weight of all the
    history before it, so on a loss that falls from ln(vocab) the EMA sits far above the curve
    for several half-lives. Past the start both agree.

    Computed with cumulative sums in blocks short enough that the exponentials stay finite."""
    values = np.asarray(values, dtype=float)
    n = len(values)
    if n == 0:
        return values
    s = np.asarray(steps, dtype=float)
    c = np.log(2.0) / max(float(half_life), 1e-9)
    span = 600.0 / c  # exp(600) is finite in float64
    out = np.empty(n)
    num = den = 0.0
    last = s[0]
    a = 0
    while a < n:
        b = max(a + 1, int(np.searchsorted(s, s[a] + span, side="right")))
        rel = s[a:b] - s[a]
        grow = np.exp(c * rel)
        carry = np.exp(-c * (s[a] - last))
        cn = np.cumsum(values[a:b] * grow) + num * carry
        cd = np.cumsum(grow) + den * carry
        out[a:b] = cn / cd
        shrink = np.exp(-c * rel[-1])
        num, den, last = cn[-1] * shrink, cd[-1] * shrink, s[b - 1]
        a = b
    return out


def trailing_median(values: np.ndarray, rows: int) -> np.ndarray:
    """Median of the `rows` values before each point (the point itself excluded); NaN at row 0."""
    s = pl.Series(values.astype(float))
    return s.rolling_median(rows, min_samples=1).shift(1).to_numpy().astype(float)


@dataclass
class LocalStats:
    """Per-row robust expectation of the loss, from the rows before it.

    level: trailing median of the previous `rows` losses (what the loss "should" be now).
    sigma: MAD-based noise of the loss around that level, floored at `rel_floor * level` so
           sparse or ultra-smooth logs do not make every wiggle a spike.
    z:     (loss - level) / sigma, the robust z-score used to flag spikes.
    """

    level: np.ndarray
    sigma: np.ndarray
    z: np.ndarray


def segments(steps: np.ndarray, gap_factor: float = 20.0, min_gap: int = 100) -> np.ndarray:
    """Segment id per row: a new segment starts after a step gap much longer than the usual
    logging interval (a log stitched from excerpts, or a long outage). Local statistics do not
    reach across such a gap, where the loss level may have moved a lot."""
    if len(steps) < 2:
        return np.zeros(len(steps), dtype=np.int64)
    d = np.diff(steps)
    usual = max(float(np.median(d)), 1.0)
    cut = d > max(gap_factor * usual, min_gap)
    return np.concatenate(([0], np.cumsum(cut))).astype(np.int64)


def local_stats(
    loss: np.ndarray, rows: int, rel_floor: float, seg: np.ndarray | None = None
) -> LocalStats:
    """Trailing median level and MAD noise per row, restarted at every segment.

    With under 8 rows of history the noise estimate means little, so the floor doubles.
    """
    seg = np.zeros(len(loss), dtype=np.int64) if seg is None else seg
    frame = pl.DataFrame({"v": loss.astype(float), "g": seg})
    level = (
        frame.select(pl.col("v").rolling_median(rows, min_samples=1).shift(1).over("g"))["v"]
        .to_numpy()
        .astype(float)
    )
    resid = np.abs(loss - level)
    frame = frame.with_columns(pl.Series("r", resid), pl.int_range(pl.len()).over("g").alias("n"))
    mad = frame.select(pl.col("r").rolling_median(rows, min_samples=1).shift(1).over("g"))
    history = frame["n"].to_numpy()
    floor = np.where(history < 8, 2 * rel_floor, rel_floor)
    sigma = np.fmax(MAD_TO_SIGMA * mad["r"].to_numpy().astype(float), floor * np.abs(level))
    with np.errstate(invalid="ignore", divide="ignore"):
        z = (loss - level) / sigma
    z[~np.isfinite(z)] = 0.0
    return LocalStats(level=level, sigma=sigma, z=z)


@dataclass
class PowerLawFit:
    """log(loss) = intercept + exponent * log(step), fitted after the warm-up.

    A healthy run is a near-straight descent in log-log space (exponent < 0, r2 near 1) whose
    short-term noise narrows as the loss falls (noise_ratio = late noise / early noise < 1).
    """

    exponent: float
    intercept: float
    r2: float
    from_step: int
    rows: int
    noise_early: float
    noise_late: float

    @property
    def noise_ratio(self) -> float:
        return self.noise_late / self.noise_early if self.noise_early > 0 else float("nan")

    def predict(self, steps: np.ndarray) -> np.ndarray:
        return np.exp(self.intercept + self.exponent * np.log(np.maximum(steps, 1)))


def warmup_end_index(steps: np.ndarray, loss: np.ndarray) -> int:
    """First row of the power-law regime: skip the first 5% of rows and the steps below 1% of
    the run (the initial collapse from ln(vocab) is not a power law). A log that starts past
    the first 1% of its steps (a window of a longer log, as `forensics watch` keeps, or an
    excerpt) holds no initial collapse: nothing is skipped."""
    if len(steps) == 0 or steps[0] > max(0.01 * steps[-1], 10):
        return 0
    limit = max(int(steps[0]), int(0.01 * steps[-1]))
    return max(int(np.searchsorted(steps, limit)), int(0.05 * len(steps)))


def fit_power_law(steps: np.ndarray, loss: np.ndarray, rows: int) -> PowerLawFit | None:
    """Least-squares line in log-log space after the warm-up; None when under 10 usable rows."""
    start = warmup_end_index(steps, loss)
    s, y = steps[start:], loss[start:]
    ok = (s > 0) & (y > 0) & np.isfinite(y)
    s, y = s[ok], y[ok]
    if len(s) < 10 or s[-1] < 2 * s[0]:
        return None  # under a factor of 2 in steps, a log-log slope means nothing
    x, ly = np.log(s.astype(float)), np.log(y)
    slope, intercept = np.polyfit(x, ly, 1)
    pred = intercept + slope * x
    ss_res = float(np.sum((ly - pred) ** 2))
    ss_tot = float(np.sum((ly - ly.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 0.0
    resid = np.abs(y - trailing_median(y, rows))
    third = max(1, len(y) // 3)
    return PowerLawFit(
        exponent=float(slope),
        intercept=float(intercept),
        r2=float(r2),
        from_step=int(s[0]),
        rows=int(len(s)),
        noise_early=float(MAD_TO_SIGMA * np.nanmedian(resid[1:third])) if third > 1 else 0.0,
        noise_late=float(MAD_TO_SIGMA * np.nanmedian(resid[-third:])),
    )


def window_power_law(
    steps: np.ndarray, loss: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Power-law fits over many row windows [lo[k], hi[k]] at once, via cumulative sums (O(n)).

    Returns (slope, intercept, rows) per window; used to ask "what drop did the curve just before
    predict for the next thousands of steps" without refitting in a loop.
    """
    x = np.log(np.maximum(steps, 1).astype(float))
    y = np.log(np.maximum(loss, 1e-12))
    zero = np.zeros(1)
    c1 = np.concatenate((zero, np.cumsum(x)))
    c2 = np.concatenate((zero, np.cumsum(y)))
    c3 = np.concatenate((zero, np.cumsum(x * x)))
    c4 = np.concatenate((zero, np.cumsum(x * y)))
    hi1 = np.asarray(hi) + 1
    lo = np.asarray(lo)
    n = (hi1 - lo).astype(float)
    sx, sy = c1[hi1] - c1[lo], c2[hi1] - c2[lo]
    sxx, sxy = c3[hi1] - c3[lo], c4[hi1] - c4[lo]
    denom = n * sxx - sx * sx
    with np.errstate(invalid="ignore", divide="ignore"):
        b = np.where(denom > 1e-12, (n * sxy - sx * sy) / denom, np.nan)
        a = (sy - b * sx) / n
    return b, a, n
