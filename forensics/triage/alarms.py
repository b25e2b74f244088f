"""Early warnings that come before the loss moves: grad-norm surges and fp16 loss-scale collapse.

Grad norm: a fast EMA (half-life of a few steps) above `grad_factor` x its baseline, the median
of the previous `grad_baseline_rows` logged norms. The baseline is a median so the surge itself
does not drag it up until it has lasted for half the window.

Loss scale (fp16): the dynamic scaler halves on every overflow and doubles back after a clean
stretch. One halving is routine; a drop to 1/8 of the recent maximum (three halvings with no
recovery) or to the floor means the run is overflowing step after step: the same alarm as a
grad-norm surge. bf16 logs print a constant 1.0 and never trigger it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from forensics.triage.config import TriageConfig
from forensics.triage.trend import ema_by_step, trailing_median


@dataclass
class Alarm:
    """A contiguous stretch of rows in alarm: first step, last step, and how bad it got."""

    kind: str  # "grad_norm_alarm" | "loss_scale_collapse"
    step: int
    end_step: int
    baseline: float
    worst: float
    ratio: float
    detail: str
    # grad norm: "burst" (a fast EMA over the trailing median) or "sustained" (the trailing
    # median over the level before the rise began)
    mode: str = "burst"


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) row indices of each run of True."""
    if not mask.any():
        return []
    d = np.diff(np.concatenate(([0], mask.astype(np.int8), [0])))
    starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1) - 1
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


def grad_norm_alarms(steps: np.ndarray, grad: np.ndarray, cfg: TriageConfig) -> list[Alarm]:
    """Alarms on the grad norm. Non-positive norms (fp16 logs print 0.000) count as not logged."""
    ok = np.isfinite(grad) & (grad > 0)
    if ok.sum() < 2:
        return []
    s, g = steps[ok], grad[ok]
    fast = ema_by_step(s, g, cfg.grad_half_life)
    base = trailing_median(g, cfg.grad_baseline_rows)
    base[:3] = np.nan  # a baseline needs a few logged norms behind it
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = fast / base
    ratio[~np.isfinite(ratio)] = 0.0
    ref = _lowest_level(base, cfg.grad_reference_rows)
    alarms: list[Alarm] = []
    for a, b in _runs(ratio > cfg.grad_factor):
        w = a + int(np.argmax(g[a : b + 1]))
        # Already 1.5x above the level before the rise for 20+ rows and 100+ steps when it
        # fired: a slow rise seen through a lagging baseline (a sparse log), not a burst.
        k = a
        while k > 0 and fast[k - 1] > 1.5 * ref[a]:
            k -= 1
        slow = a - k >= 20 and s[a] - s[k] >= 100
        if slow and alarms and alarms[-1].mode == "sustained" and s[k] <= alarms[-1].end_step:
            last = alarms[-1]  # the same slow rise, crossing the factor again
            last.end_step, last.worst = int(s[b]), max(last.worst, float(g[w]))
            last.ratio = max(last.ratio, float(ratio[a : b + 1].max()))
            continue
        alarms.append(
            Alarm(
                kind="grad_norm_alarm",
                step=int(s[a]),
                end_step=int(s[b]),
                baseline=float(base[a]),
                worst=float(g[w]),
                ratio=float(ratio[a : b + 1].max()),
                mode="sustained" if slow else "burst",
                detail=(
                    (
                        f"sustained rise (above 1.5x its earlier level since step {int(s[k])}): "
                        if slow
                        else ""
                    )  # fmt: skip
                    + f"grad-norm EMA (half-life {cfg.grad_half_life:g} steps) rose to "
                    f"{ratio[a : b + 1].max():.1f}x its baseline {base[a]:.4g} (alarm at "
                    f"{cfg.grad_factor:g}x) from step {int(s[a])} to {int(s[b])}; raw norm peaked "
                    f"at {g[w]:.4g} at step {int(s[w])}"
                ),
            )
        )
    return alarms


def _lowest_level(level: np.ndarray, rows: int) -> np.ndarray:
    """The lowest `level` over the previous `rows` rows (NaN where there is none yet)."""
    return (
        pl.Series(level)
        .fill_nan(None)
        .rolling_min(rows, min_samples=1)
        .fill_null(float("nan"))
        .to_numpy()
    )


def sustained_rise_alarms(
    steps: np.ndarray, grad: np.ndarray, bursts: list[Alarm], cfg: TriageConfig
) -> list[Alarm]:
    """A slow, sustained rise: the grad norm's level (its trailing median) above `grad_factor`
    x the level before the rise began (the lowest trailing median of the previous
    `grad_reference_rows` norms). The burst alarm's baseline follows such a rise; this
    reference does not, so a 10x rise over 2,000 steps alarms while the loss still looks fine.
    A rise that starts inside a burst alarm is that burst."""
    ok = np.isfinite(grad) & (grad > 0)
    if ok.sum() < 2 * cfg.grad_baseline_rows // 4:
        return []
    s, g = steps[ok], grad[ok]
    level = trailing_median(g, cfg.grad_baseline_rows)
    level[: cfg.grad_baseline_rows // 4] = np.nan  # a level needs a quarter window behind it
    ref = _lowest_level(level, cfg.grad_reference_rows)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = level / ref
    ratio[~np.isfinite(ratio)] = 0.0
    alarms: list[Alarm] = []
    for a, b in _runs(ratio > cfg.grad_factor):
        if any(x.step <= s[a] <= x.end_step for x in bursts + alarms):
            continue
        # It lasts while the level stays above the factor over the level before the rise (the
        # rolling reference forgets that level after `grad_reference_rows`; we do not).
        while b + 1 < len(g) and level[b + 1] > cfg.grad_factor * ref[a]:
            b += 1
        began = int(np.flatnonzero(level[: a + 1] <= 1.2 * ref[a])[-1]) if a else a
        alarms.append(
            Alarm(
                kind="grad_norm_alarm",
                step=int(s[a]),
                end_step=int(s[b]),
                baseline=float(ref[a]),
                worst=float(np.max(g[a : b + 1])),
                ratio=float(ratio[a : b + 1].max()),
                mode="sustained",
                detail=(
                    f"sustained grad-norm rise: its level (median of the last "
                    f"{cfg.grad_baseline_rows} norms) reached {ratio[a]:.1f}x the level before "
                    f"the rise ({ref[a]:.4g}; alarm at {cfg.grad_factor:g}x) at step {int(s[a])},"
                    f" rising since about step {int(s[began])}; up to "
                    f"{ratio[a : b + 1].max():.1f}x by step {int(s[b])}"
                ),
            )
        )
    return alarms


def loss_scale_alarms(steps: np.ndarray, scale: np.ndarray, cfg: TriageConfig) -> list[Alarm]:
    """fp16 loss-scale collapse: repeated halving without recovery, or down to the floor."""
    ok = np.isfinite(scale) & (scale > 0)
    if ok.sum() < 2:
        return []
    s, v = steps[ok], scale[ok]
    if s[0] <= cfg.loss_scale_window:
        # At the start of training the scaler walks down from its initial 2^16..2^32 to the
        # first scale that does not overflow: calibration, not collapse.
        settled = np.flatnonzero(np.diff(v) >= 0)
        first = int(settled[0]) + 1 if len(settled) else len(v)
        s, v = s[first:], v[first:]
        if len(v) < 2:
            return []
    frame = pl.DataFrame({"s": s.astype(np.int64), "v": v})
    recent_max = frame.select(
        pl.col("v").rolling_max_by("s", window_size=f"{int(cfg.loss_scale_window)}i")
    )["v"].to_numpy()
    collapsed = (v * cfg.loss_scale_collapse_factor <= recent_max) | (
        (v <= cfg.loss_scale_floor) & (recent_max > cfg.loss_scale_floor)
    )
    alarms: list[Alarm] = []
    for a, b in _runs(collapsed):
        if alarms and s[a] <= alarms[-1].end_step:
            continue  # still the collapse before: it had not recovered
        top = float(recent_max[a])
        # The collapse lasts until the scale is back within the factor of where it fell from
        # (at the floor for a whole window, the rolling max forgets the fall; we do not).
        while b + 1 < len(v) and v[b + 1] * cfg.loss_scale_collapse_factor <= top:
            b += 1
        while a > 0 and v[a - 1] < top:  # dated from the first halving of the fall
            a -= 1
        w = a + int(np.argmin(v[a : b + 1]))
        halvings = np.log2(top / v[w]) if v[w] > 0 else float("inf")
        alarms.append(
            Alarm(
                kind="loss_scale_collapse",
                step=int(s[a]),
                end_step=int(s[b]),
                baseline=top,
                worst=float(v[w]),
                ratio=float(top / v[w]),
                detail=(
                    f"fp16 loss scale fell from {top:g} to {v[w]:g} ({halvings:.0f} halvings "
                    f"within {cfg.loss_scale_window} steps) at step {int(s[w])}: the run is "
                    "overflowing step after step"
                ),
            )
        )
    return alarms
