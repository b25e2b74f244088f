"""The events of a triage, one dict each (events.json): spikes with their verdict, plan and
causes; divergences with the emergency action; plateaus, slow climbs and alarms with their lead
over the loss. Built from the detectors' findings by `forensics.triage.analyze.triage`."""

from __future__ import annotations

from typing import Any

from forensics.triage.actions import event_action
from forensics.triage.alarms import Alarm
from forensics.triage.causes import (
    clipping_cause,
    device_cause,
    lasting_data_cause,
    loss_scale_cause,
    lr_cause,
    numeric_cause,
    rank_causes,
    warning_chain,
)
from forensics.triage.climb import Climb
from forensics.triage.config import RunInfo, TriageConfig
from forensics.triage.plan import data_cause, decide_rule, plan_fields
from forensics.triage.runlevel import in_time
from forensics.triage.shapes import Columns, CurveResult, Divergence, Plateau
from forensics.triage.spikes import Spike


def recovery_speed(s: Spike, cfg: TriageConfig) -> tuple[str | None, str | None]:
    """Fast: momentum survived; slow (hundreds of steps): Adam's second moment was polluted."""
    if s.recovery_steps is None:
        return None, None
    if s.recovery_steps <= cfg.fast_recovery_steps:
        return "fast", "a fast recovery: the optimizer's momentum survived the bad batch"
    if s.recovery_steps >= cfg.slow_recovery_steps:
        return "slow", (
            "a slow climb back over hundreds of steps: the bad batch polluted Adam's second-moment "
            "estimate, which takes ~1/(1-beta2) steps to wash out"
        )
    return "moderate", "a moderate recovery"


def _rounded(value: float | None, plus: float = 0.0) -> float | None:
    return None if value is None else round(value + plus, 6)


def spike_event(
    res: CurveResult, s: Spike, alarms: list[Alarm], info: RunInfo, cfg: TriageConfig, cols: Columns
) -> dict[str, Any]:
    """A spike's event. One that has not come back (undecided or malignant) carries the plan at
    once: rollback point, spike command, causes ranked from the evidence; an undecided one says
    what will decide it (forensics.triage.plan)."""
    speed, meaning = recovery_speed(s, cfg)
    lookback = s.onset_step - cfg.alarm_lookahead_steps
    before = [a for a in alarms if a.step <= s.peak_step and a.end_step >= lookback]
    ev: dict[str, Any] = {
        "kind": "spike",
        "curve": res.name,
        "step": s.onset_step,
        "peak_step": s.peak_step,
        "verdict": s.verdict,
        "recovery_steps": s.recovery_steps,
        "recovery_speed": speed,
        "evidence": {
            "summary": s.reason,
            "pre_spike_level": round(s.pre_level, 6),
            "peak_loss": round(s.peak_loss, 6),
            "height": round(s.height, 6),
            "robust_z": round(s.z, 2),
            "noise_sigma": round(s.sigma, 6),
            "tolerance": round(s.tolerance, 6),
            "recovered_step": s.recovered_step,
            "recovered_fraction": None
            if s.recovered_fraction is None
            else round(s.recovered_fraction, 3),
            "lasting_excess": None if s.lasting_excess is None else round(s.lasting_excess, 6),
            # Both yardsticks: the pre-spike level, and the pre-spike trend extrapolated to
            # where the loss settled (early in a run the loss is still falling fast).
            "excess_over_pre_level": _rounded(s.settled_level, -s.pre_level),
            "pre_spike_trend_there": _rounded(s.trend_level),
            "excess_over_trend": _rounded(s.trend_excess),
            "recovery_meaning": meaning,
            "preceded_by": [f"{a.kind} at step {a.step}" for a in before],
        },
    }
    if s.verdict == "benign":
        # It came back: nothing to roll back; the cause is named for what came back.
        ev["likely_causes"] = [numeric_cause(before)]
        ev["action"] = "nothing: it came back to its trajectory (numerical); keep training"
        return ev
    causes = spike_causes(res, s, alarms, info, cfg, cols)
    plan = plan_fields(s.onset_step, s.peak_step, alarms, info, cfg, causes)
    ev["evidence"].update(plan.pop("_evidence"))
    ev.update(plan)
    ev["likely_causes"] = causes
    if s.verdict == "undecided":
        history = [
            h
            for h in res.spikes
            if h.verdict == "benign" and not h.blip and h.peak_step < s.onset_step
        ]
        ev["decide"] = decide_rule(s, history, cfg)
    ev["action"] = event_action(ev)
    return ev


def spike_causes(
    res: CurveResult, s: Spike, alarms: list[Alarm], info: RunInfo, cfg: TriageConfig, cols: Columns
) -> list[dict[str, object]]:
    """The causes of a spike that has not come back, ranked from the evidence and the field's
    priors (forensics.triage.causes): a lasting step is the data first; a device only on
    device evidence; the numeric causes as the log shows them."""
    as_rise = Divergence(
        step=s.onset_step,
        end_step=s.peak_step,
        trigger="",
        from_level=s.pre_level,
        to_level=s.peak_loss,
        grad_norm_before="",
    )
    data = data_cause(s.onset_step, info)
    lasting = s.verdict == "malignant" and not s.nonfinite
    if lasting and s.trend_excess is not None and s.trend_excess > s.tolerance:
        data = lasting_data_cause(s.trend_excess, "the pre-spike trajectory", data)
    elif lasting and s.lasting_excess is not None:
        data = lasting_data_cause(s.lasting_excess, "the pre-spike level", data)
    chain = warning_chain(alarms, s.onset_step, cfg)
    # A precursor comes before the onset: a burst on the spike's own step is the spike.
    surges = [a for a in chain if a.kind == "grad_norm_alarm" and a.step < s.onset_step]
    after = s.peak_step if s.recovered_step is None else s.recovered_step
    device = device_cause(res.steps, res.loss, s.onset_step, after, cfg)
    numeric = [
        lr_cause(cols, as_rise),
        clipping_cause(cols, surges),
        loss_scale_cause(cols, alarms, as_rise),
    ]
    # Device evidence (a noisier level) and an fp16 loss scale that collapsed before the onset
    # and had not recovered are specific: they go before the data prior.
    specific = [c for c in (device, numeric[2]) if c["supported"]]
    rest = [c for c in (*numeric, device) if c not in specific]
    return rank_causes([*specific, data, *rest])


def divergence_event(
    curve: str, d: Divergence, alarms: list[Alarm], info: RunInfo, cfg: TriageConfig
) -> dict[str, Any]:
    """A divergence: an emergency. Stop now, roll back to the last stable checkpoint before the
    first warning, and check the supported cause (the data replay only where the data is
    supported or nothing else is)."""
    causes = rank_causes([data_cause(d.step, info), *d.likely_causes])
    plan = plan_fields(d.step, d.step, alarms, info, cfg, causes, chain=True)
    evidence = {
        "summary": d.trigger,
        "from_level": round(d.from_level, 6),
        "to_level": None if d.to_level is None else round(d.to_level, 6),
        "grad_norm_before": d.grad_norm_before,
        **plan.pop("_evidence"),
    }
    ev = {
        "kind": "divergence",
        "curve": curve,
        "step": d.step,
        "end_step": d.end_step,
        "likely_causes": causes,
        **plan,
        "evidence": evidence,
    }
    ev["action"] = event_action(ev)
    return ev


def plateau_event(curve: str, p: Plateau, sps: float | None = None) -> dict[str, Any]:
    """A plateau, in steps and, where the log has a clock, in hours or days (the field guide:
    a flat stretch over ~3 days deserves a look)."""
    span = p.end_step - p.step
    lasted = in_time(span, sps)
    ev: dict[str, Any] = {
        "kind": "plateau",
        "curve": curve,
        "step": p.step,
        "end_step": p.end_step,
        "conclusion": p.conclusion,
        "checks": p.checks,
        "evidence": {
            "summary": (
                f"over steps {p.step}-{p.end_step}{f' ({lasted})' if lasted else ''} the loss "
                f"fell {p.observed_drop:.4g}; the power law fitted before predicted "
                f"{p.predicted_drop:.4g}"
            ),
            "level": round(p.level, 6),
        },
    }
    if sps is not None:
        ev["duration_hours"] = round(span * sps / 3600.0, 2)
        ev["duration_days"] = round(span * sps / 86400.0, 3)
    return ev


def climb_event(curve: str, c: Climb, sps: float | None = None) -> dict[str, Any]:
    """A slow climb: WATCH, with its slope (and its length in time where the log has a clock)."""
    lasted = in_time(c.end_step - c.step, sps)
    slope = f"{c.slope_per_1000:+.4g} per 1,000 steps"
    return {
        "kind": "slow_climb",
        "curve": curve,
        "step": c.step,
        "end_step": c.end_step,
        "slope_per_1000_steps": round(c.slope_per_1000, 6),
        "evidence": {
            "summary": (
                f"the loss EMA climbed steadily from {c.from_level:.4g} to {c.to_level:.4g} over "
                f"steps {c.step}-{c.end_step}{f' ({lasted})' if lasted else ''}: {slope}, below "
                "the divergence threshold"
            ),
        },
        "action": (
            "WATCH: a healthy loss only falls; check the lr schedule and the data mixture now, "
            "and be ready to roll back if the climb steepens"
        ),
    }


def alarm_event(
    a: Alarm, main: CurveResult, res_div: Divergence | None, cfg: TriageConfig
) -> dict[str, Any]:
    """An alarm, and how many steps it led the loss event it announced (if any followed)."""
    targets = [
        (s.onset_step, s.peak_step)
        for s in main.spikes
        if not s.blip
        and s.peak_step >= a.step
        and s.onset_step <= a.end_step + cfg.alarm_lookahead_steps
    ]
    during = None
    if res_div is not None and res_div.end_step >= a.step:
        if a.step > res_div.step:
            during = f"fired after the divergence began at step {res_div.step}"
        elif res_div.step <= a.end_step + cfg.alarm_lookahead_steps:
            targets.append((res_div.step, res_div.step))
    ev: dict[str, Any] = {
        "kind": a.kind,
        "step": a.step,
        "end_step": a.end_step,
        "evidence": {"summary": a.detail, "baseline": a.baseline, "worst": a.worst},
    }
    if a.kind == "grad_norm_alarm":
        ev["mode"] = a.mode
    if targets:
        onset, peak = min(targets)
        ev["loss_onset_step"] = onset
        ev["loss_peak_step"] = peak
        ev["led_loss_onset_by"] = onset - a.step
        ev["led_loss_peak_by"] = peak - a.step
    else:
        ev["loss_onset_step"] = None
        ev["evidence"]["loss_response"] = during or "no loss spike or divergence followed"
    return ev
