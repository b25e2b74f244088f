"""Run every detector over a log table and turn the findings into events and a summary.

`triage(table) -> TriageResult` is the whole analysis as a function of the reader's table; the
report and the CLI only format its output. Every loss curve (`loss` and each `loss:<domain>`) is
analysed on its own; alarms come from the shared grad-norm and loss-scale columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from forensics.errors import ForensicsError
from forensics.triage.alarms import (
    Alarm,
    grad_norm_alarms,
    loss_scale_alarms,
    sustained_rise_alarms,
)
from forensics.triage.climb import Climb, find_climbs
from forensics.triage.columns import loss_curves
from forensics.triage.config import RunInfo, TriageConfig
from forensics.triage.events import (
    alarm_event,
    climb_event,
    divergence_event,
    plateau_event,
    spike_event,
)
from forensics.triage.incidents import group_incidents
from forensics.triage.regimes import find_divergence, find_plateaus
from forensics.triage.runlevel import run_recurrence, seconds_per_step, time_summary
from forensics.triage.shapes import Columns, CurveResult, Plateau
from forensics.triage.spikes import Spike, find_spikes
from forensics.triage.trend import ema_by_step, fit_power_law, local_stats, segments

_TRAINING_FIELDS = ("lr", "grad_norm", "loss_scale", "consumed_samples", "tokens")


@dataclass
class TriageResult:
    events: list[dict[str, Any]]
    summary: dict[str, Any]
    curves: dict[str, CurveResult]
    alarms: list[Alarm]
    table: pl.DataFrame


# Megatron's per-interval count of skipped iterations whose loss was nan/inf (snake-cased name).
NAN_COUNTER = "number_of_nan_iterations"
SKIP_COUNTER = "number_of_skipped_iterations"


def bad_loss_steps(table: pl.DataFrame, curve: str) -> np.ndarray:
    """Steps where training went non-finite, in every form a log shows it:

    - the loss logged as nan/inf, unless the row holds nothing finite at all besides the step
      (CI golden files pad the steps after the run ended with all-nan rows: no evidence);
    - the loss left out of a row that logged training fields, in a log that otherwise prints the
      loss with them (unless Megatron's counters say the whole interval was skipped): Megatron
      prints a loss only when its interval average is >= 0, so a nan average is silently
      omitted (NVIDIA/Megatron-LM d98e8a6 megatron/training/training.py:3625);
    - Megatron's `number of nan iterations` counter above 0 (same file, 3303-3315: a skipped
      iteration whose loss was nan/inf), even when the loss field is there or left out;
    - the grad norm logged as nan/inf (a bf16 run applies that update: the weights are gone).

    Where the loss is logged on its own rows (W&B histories, per-domain losses logged now and
    then) a missing value means nothing.
    """
    t = table.with_columns(pl.col(c).cast(pl.Float64) for c in table.columns if c != "step")
    others = [c for c in t.columns if c not in ("step", curve)]
    evidence = (
        pl.any_horizontal([pl.col(c).is_finite().fill_null(False) for c in others])
        if others
        else pl.lit(True)
    )
    bad = pl.col(curve).is_not_null() & ~pl.col(curve).is_finite() & evidence
    if NAN_COUNTER in t.columns:
        bad = bad | (pl.col(NAN_COUNTER).fill_nan(None).fill_null(0) > 0)
    if "grad_norm" in t.columns:
        bad = bad | (pl.col("grad_norm").is_not_null() & ~pl.col("grad_norm").is_finite())
    other = [c for c in _TRAINING_FIELDS if c in t.columns]
    if other:
        with_fields = t.filter(pl.any_horizontal(pl.col(other).is_not_null()))
        dense = with_fields.height > 0 and with_fields[curve].null_count() <= max(
            1, 0.1 * with_fields.height
        )
        if dense:
            missing = pl.col(curve).is_null() & pl.any_horizontal(pl.col(other).is_not_null())
            if SKIP_COUNTER in t.columns:
                # A loss is summed only over iterations that were not skipped (training.py
                # 3304-3310): an interval of nothing but skipped iterations (fp16 overflows
                # while the loss scale calibrates) has no loss to print, which is not a nan
                # (the counters count the iterations since the previous log line). A nan loss on
                # an iteration that was applied is left out too, with both counters at 0.
                interval = pl.col("step").diff().fill_null(pl.col("step"))
                all_skipped = pl.col(SKIP_COUNTER).fill_nan(None).fill_null(0) >= interval
                missing = missing & ~all_skipped
            bad = bad | missing
    return t.filter(bad.fill_null(False))["step"].to_numpy()


def local_rows(steps: np.ndarray, cfg: TriageConfig) -> int:
    """Rows in the robust local window: ~`local_steps` steps, clipped to [8, window_rows]."""
    interval = float(np.median(np.diff(steps))) if len(steps) > 1 else 1.0
    return int(np.clip(round(cfg.local_steps / max(interval, 1.0)), 8, cfg.window_rows))


def analyse_curve(
    table: pl.DataFrame,
    curve: str,
    cols: Columns,
    alarms: list[Alarm],
    cfg: TriageConfig,
    info: RunInfo,
) -> CurveResult:
    finite = table.select("step", curve).filter(pl.col(curve).is_finite())
    steps = finite["step"].to_numpy()
    loss = finite[curve].to_numpy().astype(float)
    bad = bad_loss_steps(table, curve)
    last_step = int(table["step"][-1])
    if len(loss) == 0:
        return CurveResult(curve, steps, loss, loss, bad, None, [], None, [])
    stats = local_stats(loss, local_rows(steps, cfg), cfg.noise_floor_rel, segments(steps))
    spikes = find_spikes(steps, loss, stats, cfg, bad, last_step)
    div = find_divergence(steps, loss, bad, spikes, alarms, cols, cfg)
    # The healthy trend is fitted on what came before the first lasting break (a divergence, or
    # a spike that is not benign): a malignant step up would otherwise bend the fit towards it.
    breaks = [s.onset_step for s in spikes if not s.blip and s.verdict != "benign"]
    if div is not None:
        breaks.append(div.step)
    healthy_part = steps < min(breaks) if breaks else slice(None)
    ema = ema_by_step(steps, loss, cfg.ema_half_life)
    climbs = find_climbs(steps, loss, ema, spikes, cfg) if div is None else []
    plateaus = find_plateaus(steps, loss, cols, info, cfg, spikes) if div is None else []
    return CurveResult(
        name=curve,
        steps=steps,
        loss=loss,
        ema=ema,
        bad_steps=bad,
        fit=fit_power_law(steps[healthy_part], loss[healthy_part], cfg.window_rows),
        spikes=spikes,
        divergence=div,
        plateaus=[p for p in plateaus if not any(_overlap(p, c) for c in climbs)],
        climbs=climbs,
    )


def _overlap(p: Plateau, c: Climb) -> bool:
    """A climbing stretch is not a plateau: the climb is the event."""
    return p.step < c.end_step and p.end_step > c.step


def part_of_divergence(res: CurveResult, cfg: TriageConfig) -> list[Spike]:
    """Spikes that have not come back, start within `alarm_lookahead_steps` before a divergence
    or inside it, and that the runaway climbs past (or that went non-finite): its first jumps,
    one emergency, not separate spikes. A spike still above where the loss ended is its own."""
    d = res.divergence
    if d is None:
        return []
    start = d.step - cfg.alarm_lookahead_steps
    return [
        s
        for s in res.spikes
        if not s.blip
        and s.verdict != "benign"
        and s.onset_step >= start
        and (s.nonfinite or d.to_level is None or d.to_level >= s.peak_loss)
    ]


def triage(
    table: pl.DataFrame, cfg: TriageConfig | None = None, info: RunInfo | None = None
) -> TriageResult:
    """Analyse a `read_log` table: events (spikes, alarms, divergence, plateaus) and a summary."""
    cfg, info = cfg or TriageConfig(), info or RunInfo()
    cols = Columns.of(table)
    alarms: list[Alarm] = []
    if cols.grad_norm is not None:
        alarms += grad_norm_alarms(cols.step, cols.grad_norm, cfg)
        alarms += sustained_rise_alarms(cols.step, cols.grad_norm, alarms, cfg)
        alarms.sort(key=lambda a: a.step)
    if cols.loss_scale is not None:
        alarms += loss_scale_alarms(cols.step, cols.loss_scale, cfg)
    curves = {
        c: analyse_curve(table, c, cols, alarms, cfg, info) for c in loss_curves(table.columns)
    }
    if not curves or all(len(c.loss) == 0 for c in curves.values()):
        raise ForensicsError(
            "the log has no finite loss (every value nan/inf or missing): nothing to triage, and "
            "not a healthy run"
        )
    events: list[dict[str, Any]] = []
    sps = seconds_per_step(table)
    for res in curves.values():
        within = part_of_divergence(res, cfg)
        events += [
            spike_event(res, s, alarms, info, cfg, cols)
            for s in res.spikes
            if not s.blip and s not in within
        ]
        if res.divergence is not None:
            ev = divergence_event(res.name, res.divergence, alarms, info, cfg)
            if within:
                ev["evidence"]["spikes_within"] = [s.onset_step for s in within]
            events.append(ev)
        events += [plateau_event(res.name, p, sps) for p in res.plateaus]
        events += [climb_event(res.name, c, sps) for c in res.climbs]
    main = curves.get("loss") or next(iter(curves.values()))
    events = group_incidents(events, list(curves), main.steps)
    benign = [s.onset_step for s in main.spikes if s.verdict == "benign" and not s.blip]
    recurring = run_recurrence(benign, main.steps, table, cfg, info)
    if recurring is not None:
        events.append(recurring)
    events += [alarm_event(a, main, res_div=main.divergence, cfg=cfg) for a in alarms]
    events.sort(key=lambda e: (e["step"], e["kind"]))
    return TriageResult(
        events, summarise(table, curves, alarms, events, cfg), curves, alarms, table
    )


# --------------------------------------------------------------------------- rollback
# The rule itself is forensics/rollback.py's, shared with `forensics spike`.


# --------------------------------------------------------------------------- summary


def summarise(
    table: pl.DataFrame,
    curves: dict[str, CurveResult],
    alarms: list[Alarm],
    events: list[dict[str, Any]],
    cfg: TriageConfig,
) -> dict[str, Any]:
    per_curve = {}
    for name, c in curves.items():
        verdicts = [s.verdict for s in c.spikes if not s.blip]
        fit = c.fit
        per_curve[name] = {
            "points": int(len(c.loss)),
            "first_step": int(c.steps[0]) if len(c.steps) else None,
            "last_step": int(c.steps[-1]) if len(c.steps) else None,
            "last_loss": float(c.loss[-1]) if len(c.loss) else None,
            "last_ema": float(c.ema[-1]) if len(c.ema) else None,
            "spikes": {v: verdicts.count(v) for v in ("benign", "malignant", "undecided")},
            "blips": len(c.blips),
            "blip_steps": [s.peak_step for s in c.blips][:50],
            "non_finite_steps": int(len(c.bad_steps)),
            "first_non_finite_step": int(c.bad_steps[0]) if len(c.bad_steps) else None,
            "power_law": None
            if fit is None
            else {
                "exponent": round(fit.exponent, 4),
                "r2": round(fit.r2, 4),
                "from_step": fit.from_step,
                "noise_early": round(fit.noise_early, 5),
                "noise_late": round(fit.noise_late, 5),
                "noise_narrows": bool(fit.noise_ratio < 1)
                if np.isfinite(fit.noise_ratio)
                else None,
            },
        }
    kinds = [e["kind"] for e in events]
    malignant = sum(1 for e in events if e.get("verdict") == "malignant")
    if "divergence" in kinds or malignant:
        status = "act"
    elif "undecided" in [e.get("verdict") for e in events] or any(
        k in kinds
        for k in (
            "grad_norm_alarm",
            "loss_scale_collapse",
            "plateau",
            "recurring_spikes",
            "slow_climb",
        )
    ):
        status = "watch"
    else:
        status = "healthy"
    return {
        "status": status,
        "rows": table.height,
        "first_step": int(table["step"][0]),
        "last_step": int(table["step"][-1]),
        "curves": per_curve,
        "events": {k: kinds.count(k) for k in sorted(set(kinds))},
        "time": time_summary(seconds_per_step(table), cfg),
        "config": {k: v for k, v in cfg.__dict__.items() if k != "chinchilla"},
    }
