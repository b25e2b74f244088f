"""Find loss spikes and decide, honestly, whether each came back.

A spike is a run of rows whose loss sits far above the robust local level (median/MAD z-score on
the rows before it, see `trend.local_stats`). Each is then judged against its own pre-spike level:

- benign: the loss came back within tolerance of that level (recovery time reported: fast means
  the optimizer's momentum survived, hundreds of steps suggest a polluted second moment);
- malignant: `recovery_window` steps have passed (or the loss went non-finite) and it has not
  come back: a lasting step up, or only part of the way;
- undecided: not back yet, but the window has not elapsed.

A single elevated row that is back on the next row is a *blip* (per-step microbatch noise):
counted, never alarmed on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from forensics.triage.config import TriageConfig
from forensics.triage.trend import LocalStats, warmup_end_index


@dataclass
class Spike:
    """One spike on one loss curve. Indices are rows of the finite-loss arrays."""

    onset_idx: int
    peak_idx: int
    end_idx: int
    onset_step: int
    peak_step: int
    pre_level: float
    peak_loss: float
    sigma: float
    z: float
    tolerance: float
    verdict: str = "undecided"
    blip: bool = False
    recovered_step: int | None = None
    recovery_steps: int | None = None
    recovered_fraction: float | None = None
    lasting_excess: float | None = None
    # The pre-spike trend extrapolated to where the loss settles, and the settled loss over it.
    trend_level: float | None = None
    trend_excess: float | None = None
    settled_level: float | None = None
    nonfinite: bool = False
    reason: str = ""

    @property
    def height(self) -> float:
        return self.peak_loss - self.pre_level


def flag_rows(loss: np.ndarray, stats: LocalStats, cfg: TriageConfig) -> np.ndarray:
    """Row indices far above the local level: robust z and a minimum relative height."""
    excess = loss - stats.level
    flag = (stats.z > cfg.z_threshold) & (excess > cfg.min_rel_height * np.abs(stats.level))
    flag[0] = False
    return np.flatnonzero(flag)


def _groups(idx: np.ndarray, gap: int) -> list[tuple[int, int]]:
    if len(idx) == 0:
        return []
    cuts = np.flatnonzero(np.diff(idx) > gap + 1)
    starts = np.concatenate(([0], cuts + 1))
    ends = np.concatenate((cuts, [len(idx) - 1]))
    return [(int(idx[a]), int(idx[b])) for a, b in zip(starts, ends, strict=True)]


def find_spikes(
    steps: np.ndarray,
    loss: np.ndarray,
    stats: LocalStats,
    cfg: TriageConfig,
    bad_steps: np.ndarray,
    last_step: int,
) -> list[Spike]:
    """Detect and classify spikes. `bad_steps`: steps where the loss was logged non-finite;
    `last_step`: the last step of the log (how much of the recovery window has elapsed)."""
    spikes: list[Spike] = []
    groups = _groups(flag_rows(loss, stats, cfg), cfg.merge_gap_rows)
    g = 0
    while g < len(groups):
        i0, i1 = groups[g]
        spike = _new_spike(steps, loss, stats, cfg, i0, i1)
        _judge(spike, steps, loss, cfg, bad_steps, last_step)
        g += 1
        # A flagged run that starts before this spike came back is part of it.
        while g < len(groups) and (
            spike.recovered_step is None or steps[groups[g][0]] <= spike.recovered_step
        ):
            j0, j1 = groups[g]
            if spike.recovered_step is None and spike.verdict == "malignant":
                # Long after the window: a fresh spike on the new, elevated level.
                if steps[j0] - spike.peak_step > 2 * cfg.recovery_window:
                    break
            spike.end_idx = max(spike.end_idx, j1)
            seg = loss[j0 : j1 + 1]
            k = j0 + int(np.argmax(seg))
            if loss[k] > spike.peak_loss:
                spike.peak_idx, spike.peak_step, spike.peak_loss = k, int(steps[k]), float(loss[k])
                spike.z = max(spike.z, float(stats.z[k]))
            _judge(spike, steps, loss, cfg, bad_steps, last_step)
            g += 1
        if _settle_peak(spike, steps, loss, stats, cfg):
            _judge(spike, steps, loss, cfg, bad_steps, last_step)
        spikes.append(spike)
    return spikes


def _settle_peak(
    spike: Spike, steps: np.ndarray, loss: np.ndarray, stats: LocalStats, cfg: TriageConfig
) -> bool:
    """The flagged rows end once the trailing median catches up with an elevated loss, which can
    be before the loss tops out: take the highest point up to the recovery (or, while the spike
    has not come back, within a tenth of the recovery window of its onset)."""
    if spike.recovered_step is not None:
        stop = int(np.searchsorted(steps, spike.recovered_step))
    else:
        horizon = spike.onset_step + max(1, cfg.recovery_window // 10)
        stop = int(np.searchsorted(steps, horizon, side="right"))
    if stop <= spike.onset_idx:
        return False
    k = spike.onset_idx + int(np.argmax(loss[spike.onset_idx : stop]))
    if loss[k] <= spike.peak_loss:
        return False
    spike.peak_idx, spike.peak_step, spike.peak_loss = k, int(steps[k]), float(loss[k])
    spike.z = max(spike.z, float(stats.z[k]))
    return True


def _new_spike(
    steps: np.ndarray, loss: np.ndarray, stats: LocalStats, cfg: TriageConfig, i0: int, i1: int
) -> Spike:
    k = i0 + int(np.argmax(loss[i0 : i1 + 1]))
    pre, sigma = float(stats.level[i0]), float(stats.sigma[i0])
    return Spike(
        onset_idx=i0,
        peak_idx=k,
        end_idx=i1,
        onset_step=int(steps[i0]),
        peak_step=int(steps[k]),
        pre_level=pre,
        peak_loss=float(loss[k]),
        sigma=sigma,
        z=float(np.max(stats.z[i0 : i1 + 1])),
        tolerance=max(cfg.tol_sigma * sigma, cfg.tol_rel * abs(pre)),
    )


def _forward_median(values: np.ndarray, k: int, count: int) -> np.ndarray:
    """m[j] = median(values[j:j+k]) for j < count (fewer values at the very end): the level the
    loss settles at from row j."""
    n = len(values)
    count = min(count, n)
    out = np.empty(count)
    full = min(count, max(0, n - k + 1))
    if full:
        win = np.lib.stride_tricks.sliding_window_view(values[: full + k - 1], k)
        out[:full] = np.median(win, axis=1)
    for j in range(full, count):
        out[j] = np.median(values[j:])
    return out


def _first_back(after: np.ndarray, target: float) -> int | None:
    """First row where the loss is back within tolerance and so is the level it settles at from
    there (a median over the next rows, so one low point in a noisy climb does not count).

    Searched in growing chunks: most spikes (blips above all) are back within a few rows, and a
    million-step log can hold thousands of them.
    """
    lo, chunk, n = 0, 16, len(after)
    while lo < n:
        hi = min(n, lo + chunk)
        settled = _forward_median(after[lo : min(n, hi + 4)], 5, hi - lo)
        ok = np.flatnonzero((after[lo:hi] <= target) & (settled <= target))
        if len(ok):
            return lo + int(ok[0])
        lo, chunk = hi, chunk * 4
    return None


def _set_benign(spike: Spike, steps: np.ndarray, j: int) -> None:
    """Back by row `j`, at its level and on its trajectory."""
    spike.verdict = "benign"
    spike.recovered_step = int(steps[j])
    spike.recovery_steps = int(steps[j] - spike.peak_step)
    spike.recovered_fraction = 1.0
    spike.blip = spike.onset_idx == spike.end_idx and j == spike.peak_idx + 1
    gap = int(steps[j] - steps[j - 1])
    on_trend = (
        f"; on its pre-spike trajectory ({spike.trend_excess:+.3g} from the trend extrapolated)"
        if spike.trend_excess is not None
        else ""
    )
    spike.reason = (
        f"back within {spike.tolerance:.3g} of the pre-spike level {spike.pre_level:.4g} "
        f"by step {spike.recovered_step}, {spike.recovery_steps} steps after the peak"
        + (f" (first logged point after a {gap}-step gap)" if gap > 1 else "")
        + on_trend
    )


def _judge(
    spike: Spike,
    steps: np.ndarray,
    loss: np.ndarray,
    cfg: TriageConfig,
    bad_steps: np.ndarray,
    last_step: int,
) -> None:
    """Set verdict, recovery and explanation of a spike from the rows after its peak."""
    spike.verdict, spike.blip, spike.nonfinite = "undecided", False, False
    spike.recovered_step = spike.recovery_steps = None
    spike.recovered_fraction = spike.lasting_excess = None
    spike.trend_level = spike.trend_excess = spike.settled_level = None
    horizon = spike.peak_step + 4 * cfg.recovery_window
    # ... and at least a few rows past it: a sparse log may next speak after a long gap.
    j_end = max(int(np.searchsorted(steps, horizon, side="right")), spike.peak_idx + 6)
    after = loss[spike.peak_idx + 1 : j_end]
    target = spike.pre_level + spike.tolerance
    first_back = _first_back(after, target)
    bad_after = bad_steps[bad_steps > spike.peak_step]
    if first_back is not None:
        j = spike.peak_idx + 1 + first_back
        first_bad = bad_after[0] if len(bad_after) else None
        if (first_bad is None or first_bad > steps[j]) and _on_trajectory(
            spike, steps, loss, cfg, j, last_step
        ):
            _set_benign(spike, steps, j)
            return
    elapsed = last_step - spike.peak_step
    tail = _settled_level(steps, loss, spike, cfg)
    if tail is not None:
        spike.lasting_excess = tail - spike.pre_level
        spike.recovered_fraction = (
            float(np.clip(1.0 - spike.lasting_excess / spike.height, 0.0, 1.0))
            if spike.height > 0
            else None
        )
    spike.settled_level = tail
    if spike.trend_level is None:
        trend_gap(spike, steps, loss, cfg, spike.peak_idx + 1)
    frac = spike.recovered_fraction
    so_far = f"{100 * frac:.0f}% of the way back" if frac is not None else "no point after the peak"
    if len(bad_after):
        spike.verdict, spike.nonfinite = "malignant", True
        spike.reason = (
            f"the loss went non-finite (nan or not logged) at step {int(bad_after[0])}, "
            f"{int(bad_after[0] - spike.peak_step)} steps after the peak, without coming back "
            f"({so_far})"
        )
    elif first_back is not None and spike.trend_excess is not None:
        _off_trajectory(spike, elapsed, so_far, cfg)
    elif elapsed >= cfg.recovery_window:
        spike.verdict = "malignant"
        shape = (
            "returned less than half-way"
            if frac is not None and frac < 0.5
            else "a lasting step up"
        )
        spike.reason = (
            f"{shape}: {elapsed} steps after the peak the loss settles "
            f"{spike.lasting_excess:+.3g} above the pre-spike level {spike.pre_level:.4g} "
            f"({so_far}; tolerance {spike.tolerance:.3g}, window {cfg.recovery_window} steps)"
        )
    else:
        spike.reason = (
            f"not back yet ({so_far}) {elapsed} steps after the peak; its "
            f"{cfg.recovery_window}-step recovery window closes at step "
            f"{spike.peak_step + cfg.recovery_window}"
        )


def _settled_level(
    steps: np.ndarray, loss: np.ndarray, spike: Spike, cfg: TriageConfig
) -> float | None:
    """Median loss over the second half of the recovery window (or the last rows we have)."""
    a = int(np.searchsorted(steps, spike.peak_step + cfg.recovery_window // 2, side="left"))
    b = int(np.searchsorted(steps, spike.peak_step + cfg.recovery_window, side="right"))
    a = max(a, spike.peak_idx + 1)
    if b <= a:  # the window is not covered yet: the last few rows we have after the peak
        a, b = max(spike.peak_idx + 1, b - 5), b
        if b <= a:
            return None
    return float(np.median(loss[a:b]))


def pre_spike_trend(
    steps: np.ndarray, loss: np.ndarray, spike: Spike, cfg: TriageConfig
) -> tuple[float, float] | None:
    """The local power law (log loss on log step, on a 5-row rolling median so blips do not tilt
    it) over the `2 x recovery_window` steps before the onset, after the warm-up; None with
    under 20 rows or a span under half the recovery window (too short to extrapolate from)."""
    lo = max(int(np.searchsorted(steps, spike.onset_step - 2 * cfg.recovery_window)),
             warmup_end_index(steps, loss))  # fmt: skip
    hi = spike.onset_idx
    if hi - lo < 20 or steps[hi - 1] - steps[lo] < cfg.recovery_window // 2:
        return None
    s, y = steps[lo:hi].astype(float), loss[lo:hi]
    y = pl.Series(y).rolling_median(5, min_samples=1).to_numpy()
    if (s <= 0).any() or (y <= 0).any():
        return None
    slope, intercept = np.polyfit(np.log(s), np.log(y), 1)
    return float(slope), float(intercept)


def _on_trajectory(
    spike: Spike, steps: np.ndarray, loss: np.ndarray, cfg: TriageConfig, j: int, last_step: int
) -> bool:
    """Back at its level by row `j`: is it back on the trajectory it was on? True when the
    settled loss is within tolerance of the pre-spike trend, or when there is no trend to judge
    by (too few rows before it, or a one-row blip back on the next row)."""
    if spike.onset_idx == spike.end_idx and j == spike.peak_idx + 1:
        return True
    trend_gap(spike, steps, loss, cfg, j)
    return spike.trend_excess is None or spike.trend_excess <= spike.tolerance


def trend_gap(spike: Spike, steps: np.ndarray, loss: np.ndarray, cfg: TriageConfig, j: int) -> None:
    """Set `trend_level` and `trend_excess`: the settled loss (median over the second half of
    the recovery window, or the rows from row `j` so far) against the pre-spike trend
    extrapolated to the middle of those rows."""
    fit = pre_spike_trend(steps, loss, spike, cfg)
    if fit is None:
        return
    a = max(int(np.searchsorted(steps, spike.peak_step + cfg.recovery_window // 2)), j)
    b = int(np.searchsorted(steps, spike.peak_step + cfg.recovery_window, side="right"))
    if b - a < 5:
        a, b = j, max(b, j + 5)
    window_s, window = steps[a:b], loss[a:b]
    if len(window) < 5:
        return
    at = float(np.median(window_s))
    spike.trend_level = float(np.exp(fit[1] + fit[0] * np.log(max(at, 1.0))))
    spike.settled_level = float(np.median(window))
    spike.trend_excess = spike.settled_level - spike.trend_level


def _off_trajectory(spike: Spike, elapsed: int, so_far: str, cfg: TriageConfig) -> None:
    """Back to its pre-spike level but not to the trajectory it was on: malignant once the
    window has passed, undecided before."""
    where = (
        f"back to its pre-spike level {spike.pre_level:.4g} but not to its trajectory: "
        f"{elapsed} steps after the peak the loss settles {spike.trend_excess:+.3g} above the "
        f"pre-spike trend extrapolated there ({spike.trend_level:.4g}; tolerance "
        f"{spike.tolerance:.3g})"
    )
    if elapsed >= cfg.recovery_window:
        spike.verdict = "malignant"
        spike.lasting_excess = spike.trend_excess
        spike.reason = f"{where}: a lasting step off the trajectory"
    else:
        spike.reason = (
            f"{where} so far; its {cfg.recovery_window}-step recovery window closes at step "
            f"{spike.peak_step + cfg.recovery_window}"
        )
