"""A slow climb: the loss trending up for thousands of steps, below the divergence threshold.

The field guide calls divergence "the loss climbs and does not turn back"; a climb too slow to
cross `divergence_rel` is still not a healthy run (a healthy loss only falls). Over every window
of `climb_steps` the loss EMA is compared with where it stood at the window's start: a rise of
over `climb_min_rel` of the level, steady (the middle of the window a quarter to three quarters
of the way up, so a spike's bump is not a climb), is a WATCH event with its slope.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from forensics.triage.config import TriageConfig
from forensics.triage.spikes import Spike


@dataclass
class Climb:
    step: int
    end_step: int
    from_level: float
    to_level: float

    @property
    def slope_per_1000(self) -> float:
        return 1000.0 * (self.to_level - self.from_level) / max(self.end_step - self.step, 1)


# The slope of the raw loss over the window must stand this many standard errors above zero,
# over at least this many logged points: a sparse noisy log (one point per 100 steps) wanders
# by a few percent over 2,000 steps without climbing.
MIN_T = 6.0
MIN_ROWS = 30


def window_slope_t(steps: np.ndarray, loss: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Least-squares slope of loss on step over rows [j[i], i], over its standard error, for
    every row at once (cumulative sums: O(n))."""
    x = (steps - steps[0]).astype(float)
    y = loss.astype(float)
    zero = np.zeros(1)
    c = [np.concatenate((zero, np.cumsum(v))) for v in (np.ones_like(x), x, y, x * x, x * y, y * y)]
    hi, lo = np.arange(1, len(x) + 1), j
    n, sx, sy, sxx, sxy, syy = (ci[hi] - ci[lo] for ci in c)
    with np.errstate(invalid="ignore", divide="ignore"):
        vxx = sxx - sx * sx / n
        vxy = sxy - sx * sy / n
        slope = vxy / vxx
        sse = np.maximum(syy - sy * sy / n - slope * vxy, 0.0)
        se = np.sqrt(sse / np.maximum(n - 2, 1) / vxx)
        t = slope / se
    t[~np.isfinite(t) | (n < MIN_ROWS)] = 0.0
    return t


def find_climbs(
    steps: np.ndarray,
    loss: np.ndarray,
    level: np.ndarray,
    spikes: list[Spike],
    cfg: TriageConfig,
) -> list[Climb]:
    """Steady rises of the EMA `level` over `climb_steps` (see the module docstring) whose
    raw-loss slope is significant; windows holding a spike that had not come back are left
    out (a step up is a spike)."""
    if len(steps) < MIN_ROWS or steps[-1] - steps[0] < cfg.climb_steps:
        return []
    j = np.searchsorted(steps, steps - cfg.climb_steps, side="left")
    mid = np.searchsorted(steps, steps - cfg.climb_steps // 2, side="left")
    rise = level - level[j]
    part = (level[mid] - level[j]) / np.where(rise != 0, rise, np.nan)
    with np.errstate(invalid="ignore"):
        flag = (steps - steps[0] >= cfg.climb_steps) & (rise > cfg.climb_min_rel * np.abs(level[j]))
        flag &= (part > 0.25) & (part < 0.75)
        flag &= window_slope_t(steps, loss, j) > MIN_T
    for sp in spikes:
        if not sp.blip:
            until = sp.recovered_step if sp.recovered_step is not None else steps[-1]
            flag &= ~((steps[j] <= until) & (steps >= sp.onset_step))
    climbs: list[Climb] = []
    d = np.diff(np.concatenate(([0], flag.astype(np.int8), [0])))
    for r0, r1 in zip(np.flatnonzero(d == 1), np.flatnonzero(d == -1) - 1, strict=True):
        # Dated from the lowest EMA in the climb_steps before its first window: where it turned.
        lo = int(np.searchsorted(steps, steps[j[r0]] - cfg.climb_steps))
        a = lo + int(np.argmin(level[lo : r0 + 1]))
        if climbs and steps[a] <= climbs[-1].end_step:  # one climb, interrupted by noise
            climbs[-1].end_step, climbs[-1].to_level = int(steps[r1]), float(level[r1])
            continue
        climbs.append(Climb(int(steps[a]), int(steps[r1]), float(level[a]), float(level[r1])))
    return climbs
