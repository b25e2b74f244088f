"""Slow regimes of a loss curve: divergence (a rise that does not come back) and plateaus.

Divergence is judged on a short rolling median of the loss against its best value so far: a rise
of `divergence_rel` above the best that lasts `divergence_min_steps`, keeps climbing and is still
there at the end of the log; or training going non-finite (nan/inf loss or grad norm, Megatron's
nan-iteration counter), with or without a precursor (an unrecovered spike, a grad-norm alarm, a
loss-scale collapse). Rows of nothing but nan (CI golden files pad the steps after the run
ended) are not evidence and never reach here.

A plateau is a stretch of `plateau_steps` over which the loss fell by less than `plateau_frac` of
what the power law fitted to the curve before it predicted, checked in the order a senior
engineer would: the learning-rate schedule, data repetition, then model capacity (Chinchilla).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from forensics.triage.alarms import Alarm
from forensics.triage.causes import divergence_causes, grad_norm_story
from forensics.triage.config import CHINCHILLA_EPOCH, RunInfo, TriageConfig
from forensics.triage.shapes import Columns, Divergence, Plateau
from forensics.triage.spikes import Spike
from forensics.triage.trend import ema_by_step, warmup_end_index, window_power_law


def find_divergence(
    steps: np.ndarray,
    loss: np.ndarray,
    bad_steps: np.ndarray,
    spikes: list[Spike],
    alarms: list[Alarm],
    cols: Columns,
    cfg: TriageConfig,
) -> Divergence | None:
    """The run's divergence, if any (at most one: after it the log is not a training run)."""
    if len(loss) == 0:
        return None
    smooth = pl.Series(loss).rolling_median(5, min_samples=1).to_numpy()
    # The best level so far, from a wider median: on a noisy per-step curve the minimum of a
    # 5-point median is a lucky low, not a level the run ever held.
    wide = min(cfg.window_rows, max(5, len(loss) // 10))
    best = np.minimum.accumulate(pl.Series(loss).rolling_median(wide, min_samples=1).to_numpy())
    rising = smooth - best > cfg.divergence_rel * np.abs(best)
    # The run of rising rows that reaches the end of the finite log.
    onset_idx = None
    if rising[-1]:
        not_rising = np.flatnonzero(~rising)
        onset_idx = int(not_rising[-1] + 1) if len(not_rising) else 0
        # Date the onset back to where the loss last sat near its best (the threshold is
        # crossed some way into the climb).
        near = np.flatnonzero(
            smooth[:onset_idx] - best[:onset_idx] <= 0.02 * np.abs(best[:onset_idx])
        )
        if len(near):
            onset_idx = int(near[-1] + 1)
    last = int(max(steps[-1], bad_steps[-1] if len(bad_steps) else steps[-1]))
    trailing_bad = bad_steps[bad_steps > steps[-1]]
    div: Divergence | None = None
    if onset_idx is not None and onset_idx < len(steps) - 1:
        seg_s, seg = steps[onset_idx:], smooth[onset_idx:]
        lasted = int(seg_s[-1] - seg_s[0])
        with np.errstate(invalid="ignore", divide="ignore"):
            climbing = len(seg) >= 3 and np.corrcoef(seg_s, seg)[0, 1] > 0.3
        # Long enough in steps, or in logged points (a short run logged every step).
        sustained = lasted >= cfg.divergence_min_steps or len(seg) >= 20
        if sustained and climbing:
            div = Divergence(
                step=int(steps[onset_idx]),
                end_step=last,
                trigger=(
                    f"the loss rose from its best {best[onset_idx]:.4g} to {smooth[-1]:.4g} over "
                    f"{lasted} steps and was still climbing at the end of the log"
                ),
                from_level=float(best[onset_idx]),
                to_level=float(smooth[-1]),
                grad_norm_before="",
            )
    if div is None and len(bad_steps):
        rise = int(steps[onset_idx]) if onset_idx is not None and len(trailing_bad) else None
        div = nonfinite_divergence(steps, bad_steps, spikes, alarms, rise, best, smooth, cfg)
    if div is not None:
        div.grad_norm_before = grad_norm_story(cols, div.step, alarms, cfg)
        div.likely_causes = divergence_causes(cols, div, alarms, steps, loss, cfg)
    return div


def nonfinite_divergence(
    steps: np.ndarray,
    bad_steps: np.ndarray,
    spikes: list[Spike],
    alarms: list[Alarm],
    rise: int | None,
    best: np.ndarray,
    smooth: np.ndarray,
    cfg: TriageConfig,
) -> Divergence:
    """Non-finite training (see analyze.bad_loss_steps: padding rows are not in `bad_steps`) is
    a divergence whether or not something announced it and whether or not the loss came back
    finite afterwards (Megatron skips nan iterations and carries on): never healthy. It is dated
    from its precursor (an unrecovered spike, an alarm, a rise into the nan) when there is one."""
    nan_step = int(bad_steps[0])
    horizon = nan_step - cfg.recovery_window
    pre = [s for s in spikes if s.verdict != "benign" and horizon <= s.peak_step <= nan_step]
    pre_alarms = [a for a in alarms if horizon <= a.step <= nan_step]
    starts = [s.onset_step for s in pre] + [a.step for a in pre_alarms]
    start = min(starts + ([rise] if rise is not None else []) + [nan_step])
    if pre:
        what = f" after an unrecovered spike starting at step {start}"
    elif rise is not None:
        what = f" after a rise starting at step {start}"
    elif pre_alarms:
        what = f" after a {pre_alarms[0].kind.replace('_', ' ')} at step {start}"
    else:
        what = " with no warning before it"
    finite_after = steps[steps > bad_steps[-1]]
    after = (
        f"; the loss was finite again from step {int(finite_after[0])} (the trainer skipped "
        "or survived those iterations: check the weights before trusting the run)"
        if len(finite_after)
        else ""
    )
    later = "" if len(bad_steps) == 1 else f" and {len(bad_steps) - 1} later logged steps"
    i = int(np.searchsorted(steps, start))
    return Divergence(
        step=start,
        end_step=max(int(steps[-1]), int(bad_steps[-1])),
        trigger=(
            f"training went non-finite at step {nan_step}{later}{what} (a nan/inf loss or grad "
            f"norm, a loss left out, or Megatron's nan-iteration counter){after}"
        ),
        from_level=float(best[max(i - 1, 0)]),
        to_level=float(smooth[-1]),
        grad_norm_before="",
    )


def find_plateaus(
    steps: np.ndarray,
    loss: np.ndarray,
    cols: Columns,
    info: RunInfo,
    cfg: TriageConfig,
    spikes: list[Spike] | None = None,
) -> list[Plateau]:
    """Stretches of `plateau_steps` where the loss fell far less than its power law predicted.

    Windows that hold a spike (until it recovered) are left out: a step up is not a plateau."""
    if len(steps) < 20 or steps[-1] - steps[0] < cfg.plateau_steps:
        return []
    level = ema_by_step(steps, loss, cfg.ema_half_life)
    # Fits run on a rolling median: a few one-step blips must not tilt a least-squares slope.
    robust = pl.Series(loss).rolling_median(cfg.window_rows, min_samples=1).to_numpy()
    start = warmup_end_index(steps, loss)
    # For each row i: the window [j, i] of `plateau_steps`, and the fit window before it,
    # [lo, j], of up to 3 x plateau_steps (a local fit: a global one over-predicts late drops).
    j = np.searchsorted(steps, steps - cfg.plateau_steps, side="left")
    lo = np.maximum(np.searchsorted(steps, steps[j] - 3 * cfg.plateau_steps, side="left"), start)
    b, a, count = window_power_law(steps, robust, np.minimum(lo, j), j)
    # The fit needs 20 points spanning at least one plateau length, or its slope is noise.
    span = steps[j] - steps[np.minimum(lo, j)]
    ok = (steps - steps[0] >= cfg.plateau_steps) & (count >= 20) & (span >= cfg.plateau_steps)
    ok &= np.isfinite(b) & (b < 0)
    sj, si = steps[j].astype(float), steps.astype(float)
    with np.errstate(over="ignore", invalid="ignore"):
        predicted = np.exp(a + b * np.log(sj)) - np.exp(a + b * np.log(si))
    observed = level[j] - level
    flat = ok & (predicted > cfg.plateau_min_drop_rel * level)
    flat &= observed < cfg.plateau_frac * predicted
    flat &= observed > -0.01 * level  # a rise is a spike or a divergence, not a plateau
    for sp in spikes or []:
        if not sp.blip:
            until = sp.recovered_step if sp.recovered_step is not None else steps[-1]
            flat &= ~((steps[j] <= until) & (steps >= sp.onset_step))
    plateaus: list[Plateau] = []
    d = np.diff(np.concatenate(([0], flat.astype(np.int8), [0])))
    for r0, r1 in zip(np.flatnonzero(d == 1), np.flatnonzero(d == -1) - 1, strict=True):
        if plateaus and steps[j[r0]] <= plateaus[-1].end_step + cfg.plateau_steps // 2:
            prev = plateaus[-1]  # one plateau, interrupted by noise
            prev.end_step, prev.level = int(steps[r1]), float(level[r1])
            prev.observed_drop = float(level[np.searchsorted(steps, prev.step)] - level[r1])
            prev.predicted_drop = max(prev.predicted_drop, float(predicted[r1]))
            continue
        plateaus.append(
            Plateau(
                step=int(steps[j[r0]]),
                end_step=int(steps[r1]),
                level=float(level[r1]),
                observed_drop=float(observed[r1]),
                predicted_drop=float(predicted[r1]),
            )
        )
    kept = []
    for p in plateaus:
        # Judge the merged stretch as a whole against the fit of the curve before it.
        i0 = int(np.searchsorted(steps, p.step))
        i1 = int(np.searchsorted(steps, p.end_step))
        f0 = max(int(np.searchsorted(steps, p.step - 3 * cfg.plateau_steps)), start)
        fb, fa, fn = window_power_law(steps, robust, np.array([min(f0, i0)]), np.array([i0]))
        fit_span = steps[i0] - steps[min(f0, i0)]
        if not (fn[0] >= 20 and fit_span >= cfg.plateau_steps and np.isfinite(fb[0]) and fb[0] < 0):
            continue
        p.predicted_drop = float(
            np.exp(fa[0] + fb[0] * np.log(steps[i0])) - np.exp(fa[0] + fb[0] * np.log(steps[i1]))
        )
        p.observed_drop = float(level[i0] - level[i1])
        rose = p.observed_drop < -0.01 * p.level
        expected = p.predicted_drop > cfg.plateau_min_drop_rel * p.level
        if p.observed_drop < cfg.plateau_frac * p.predicted_drop and expected and not rose:
            p.checks, p.conclusion = plateau_checks(p, cols, info, cfg)
            kept.append(p)
    return kept


def tokens_at(cols: Columns, step: int, info: RunInfo) -> tuple[float | None, str]:
    """Tokens consumed by `step`, and how we know (or what we would need)."""
    t = cols.at(cols.tokens, step)
    if t is not None:
        return t, "the log's consumed tokens"
    if info.seq_length:
        smp = cols.at(cols.samples, step)
        if smp is not None:
            return smp * info.seq_length, "consumed samples x --seq-length"
        gbs = cols.at(cols.batch, step)
        if gbs is not None:
            return step * gbs * info.seq_length, "step x global batch size x --seq-length"
        return None, "needs consumed samples or the global batch size in the log"
    return None, "needs consumed tokens in the log, or --seq-length with consumed samples"


def plateau_checks(
    p: Plateau, cols: Columns, info: RunInfo, cfg: TriageConfig
) -> tuple[list[dict[str, object]], str]:
    """LR schedule, then data repetition, then capacity; each says what it needed if missing."""
    checks: list[dict[str, object]] = []
    conclusion = ""
    lr_end = cols.at(cols.lr, p.end_step)
    if lr_end is None:
        checks.append({"check": "learning rate", "result": None, "needed": "the lr field"})
    else:
        lr_max = float(np.nanmax(cols.lr)) if cols.lr is not None else lr_end
        frac = lr_end / lr_max if lr_max > 0 else 1.0
        at_floor = frac <= cfg.lr_floor_frac
        checks.append(
            {
                "check": "learning rate",
                "result": "at floor" if at_floor else "not at floor",
                "evidence": f"lr {lr_end:.3g} is {frac:.0%} of its peak {lr_max:.3g}",
            }
        )
        if at_floor:
            conclusion = "by design: the lr schedule is near its floor, the curve flattens with it"
    tokens, how = tokens_at(cols, p.end_step, info)
    if tokens is None or not info.corpus_tokens:
        need = [how] if tokens is None else []
        if not info.corpus_tokens:
            need.append("--corpus-tokens")
        checks.append({"check": "data repetition", "result": None, "needed": "; ".join(need)})
    else:
        epochs = tokens / info.corpus_tokens
        checks.append(
            {
                "check": "data repetition",
                "result": "repeated data" if epochs > 1 else "no repetition",
                "evidence": f"{tokens:.3g} tokens consumed ({how}) = {epochs:.2f} x the corpus",
            }
        )
        if epochs > 1 and not conclusion:
            conclusion = (
                f"repeated data ({epochs:.2f} epochs): add fresh data or anneal the learning rate"
            )
    if tokens is None or not info.params:
        need = [how] if tokens is None else []
        if not info.params:
            need.append("--params")
        checks.append({"check": "model capacity", "result": None, "needed": "; ".join(need)})
    else:
        c, e = cfg.chinchilla, CHINCHILLA_EPOCH
        expected = c["E"] + c["A"] / info.params ** c["alpha"] + c["B"] / tokens ** c["beta"]
        epoch = e["E"] + e["A"] / info.params ** e["alpha"] + e["B"] / tokens ** e["beta"]
        reached = p.level <= 1.02 * max(expected, epoch)
        checks.append(
            {
                "check": "model capacity",
                "result": "capacity reached" if reached else "below capacity",
                "evidence": (
                    f"plateau loss {p.level:.4g} vs Chinchilla L(N={info.params:.3g}, "
                    f"D={tokens:.3g}) = {expected:.4g} (Epoch AI refit {epoch:.4g}); the constants "
                    "depend on tokenizer and data, so treat this as a rough yardstick"
                ),
            }
        )
        if reached and not conclusion:
            conclusion = "capacity reached: a bigger model, or anneal to harvest the last gains"
    if not conclusion:
        missing = [str(ch["check"]) for ch in checks if ch.get("result") is None]
        conclusion = (
            "unexplained by the checks we could run"
            + (f" (could not check: {', '.join(missing)})" if missing else "")
            + ": look at the data mixture and the optimizer state"
        )
    return checks, conclusion
