"""Run-level findings: how often benign spikes recur, and what the steps mean in time.

The field guide: a benign spike needs nothing "as long as it happens once or twice a month and
always comes back"; if spikes keep recurring and no dirty data is found, touch the
hyperparameters (lower lr, tighter grad clip). And a flat stretch is judged in time ("over ~3
days deserves a look"): where the log carries the iteration time (Megatron's `elapsed time per
iteration`) or a timestamp, steps are also stated in hours and days.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from forensics.triage.config import RunInfo, TriageConfig
from forensics.triage.plan import next_command

DAY_S = 86400.0


def seconds_per_step(table: pl.DataFrame) -> float | None:
    """The median seconds per iteration: the logged iteration time, else the wall time between
    timestamps (`timestamp`, W&B's `_timestamp`) over the steps between them; None without."""
    if "iteration_time_s" in table.columns:
        t = table["iteration_time_s"].cast(pl.Float64).drop_nulls().drop_nans().to_numpy()
        t = t[t > 0]
        if len(t):
            return float(np.median(t))
    for name in ("timestamp", "runtime"):
        if name in table.columns:
            both = table.select("step", pl.col(name).cast(pl.Float64)).drop_nulls().drop_nans()
            if both.height >= 2:
                ds = np.diff(both["step"].to_numpy()).astype(float)
                dt = np.diff(both[name].to_numpy())
                ok = (ds > 0) & (dt > 0)
                if ok.any():
                    return float(np.median(dt[ok] / ds[ok]))
    return None


def in_time(steps: float, sps: float | None) -> str:
    """`steps` as hours or days, or '' without a clock."""
    if sps is None:
        return ""
    hours = steps * sps / 3600.0
    return f"{hours / 24:.1f} days" if hours >= 48 else f"{hours:.1f} h"


def time_summary(sps: float | None, cfg: TriageConfig) -> dict[str, Any] | None:
    """What the step thresholds mean in time for this log."""
    if sps is None:
        return None
    return {
        "seconds_per_step": round(sps, 4),
        "plateau_steps": cfg.plateau_steps,
        "plateau_steps_in_time": in_time(cfg.plateau_steps, sps),
        "recovery_window_in_time": in_time(cfg.recovery_window, sps),
    }


def recurrence_event(
    benign_steps: list[int],
    first: int,
    last: int,
    sps: float | None,
    cfg: TriageConfig,
    lr_peak: float | None,  # the lr at the latest spike
    command: str,
) -> dict[str, Any] | None:
    """The run-level finding when benign spikes recur past the stated rate: at least
    `recur_min_count`, and more than `recur_per_month` a month where the log has a clock (the
    field guide's "once or twice a month"), else more than `recur_per_1000_steps`."""
    count, span = len(benign_steps), max(last - first, 1)
    if count < cfg.recur_min_count:
        return None
    per_1000 = 1000.0 * count / span
    per_day = None if sps is None else count / (span * sps / DAY_S)
    if per_day is not None:
        recurring = per_day * 30 > cfg.recur_per_month
        rate = f"{per_1000:.2f} per 1,000 steps, {per_day:.2f} per day over {in_time(span, sps)}"
        limit = f"the field guide leaves alone up to {cfg.recur_per_month:g} a month"
    else:
        recurring = per_1000 > cfg.recur_per_1000_steps
        rate = f"{per_1000:.2f} per 1,000 steps (no iteration time in the log)"
        limit = f"past {cfg.recur_per_1000_steps:g} per 1,000 steps"
    if not recurring:
        return None
    lower = (
        f"lower the lr by a third (at the latest spike {lr_peak:.3g} -> {lr_peak * 2 / 3:.3g})"
        if lr_peak
        else "lower the lr by a third"
    )
    said = f"{count} benign spikes in {span} steps ({rate}); {limit}"
    finding = (
        f"recurring spikes: {said}. If the data "
        f"is clean (replay the latest window: `{command}` finds no culprit), {lower} or tighten "
        "the grad clip (e.g. halve --clip-grad)"
    )
    return {
        "kind": "recurring_spikes",
        "curve": "loss",
        "step": int(benign_steps[0]),
        "end_step": int(benign_steps[-1]),
        "count": count,
        "per_1000_steps": round(per_1000, 3),
        "per_day": None if per_day is None else round(per_day, 3),
        "finding": finding,
        "action": (
            "check the data (replay a spike's window), then, if it is clean, touch the "
            "hyperparameters: lower the lr (e.g. by a third) or tighten the grad clip"
        ),
        "evidence": {"summary": said, "spike_steps": [int(s) for s in benign_steps][:100]},
    }


def run_recurrence(
    benign_steps: list[int],
    steps: np.ndarray,
    table: pl.DataFrame,
    cfg: TriageConfig,
    info: RunInfo,
    first: int | None = None,
) -> dict[str, Any] | None:
    """The recurrence finding for a log (`first`: the run's first step when the table is only a
    window of it, as in `forensics watch`)."""
    if len(benign_steps) < cfg.recur_min_count or not len(steps):
        return None
    last_spike = int(benign_steps[-1])
    lr_peak = None
    if "lr" in table.columns:
        before = table.filter(pl.col("step") <= last_spike)["lr"].cast(pl.Float64)
        before = before.drop_nulls().drop_nans()
        lr_peak = float(before[-1]) if len(before) else None
    command, _ = next_command(last_spike, max(last_spike - 100, 0), info)
    start = int(steps[0]) if first is None else first
    return recurrence_event(
        benign_steps, start, int(steps[-1]), seconds_per_step(table), cfg, lr_peak, command
    )
