"""The causes of a loss event that has not come back, each with the evidence the log holds.

The field's priors decide the order before the evidence does (../shared/notes/field-guide.md):

- a spike that does not come back (a lasting step, or back to its level but not to its
  trajectory) is the data: a transient glitch, a hard batch or a bf16 overflow comes back;
- a device ranks first only on device evidence (a noisier level after the event than before,
  per-rank losses that disagree): a persistent device fault shows as divergence or per-rank
  disagreement, never as a clean step;
- a divergence is checked cause by cause: the learning rate (or no warmup), gradient clipping
  (bursts of huge norms), the fp16 loss scale (a collapse anywhere before the loss left its
  trend, however long the flat stretch after it), a device.

Every cause is `{"cause", "supported", "evidence"}`: supported True (the log shows it), None
(the log cannot tell; the evidence says what would) or False (the log rules it out). The
evidence line is written from the same numbers as the flag, so the two never disagree.
"""

from __future__ import annotations

import numpy as np

from forensics.triage.alarms import Alarm
from forensics.triage.config import TriageConfig
from forensics.triage.shapes import Columns, Divergence

DATA = "the data (a bad batch, or new data in the blend)"
LR = "learning rate too high or no warmup"
CLIP = "gradient clipping misconfigured"
LOSS_SCALE = "fp16 loss scale collapsed"
DEVICE = "a faulty device"
NUMERICS = "numerics or the optimizer (every domain moved at once)"
# A level this much noisier after the event than before is device evidence.
NOISIER = 2.0


def cause(name: str, supported: bool | None, evidence: str) -> dict[str, object]:
    return {"cause": name, "supported": supported, "evidence": evidence}


def warning_chain(alarms: list[Alarm], step: int, cfg: TriageConfig) -> list[Alarm]:
    """The alarms that led up to a loss event at `step`: the last one within `recovery_window`
    of it (the guide: tens to hundreds of steps before), then each earlier one within
    `recovery_window` of the next
    (a train of grad-norm bursts, a slow rise, a loss-scale fall). The first is the first
    warning: the rollback goes before it."""
    chain: list[Alarm] = []
    horizon = step - cfg.recovery_window
    for a in sorted((a for a in alarms if a.step <= step), key=lambda a: -a.step):
        if a.end_step >= horizon:
            chain.append(a)
            horizon = a.step - cfg.recovery_window
    return sorted(chain, key=lambda a: a.step)


def grad_norm_story(cols: Columns, step: int, alarms: list[Alarm], cfg: TriageConfig) -> str:
    """What the grad norm did in the `recovery_window` steps before `step`, in one sentence."""
    if cols.grad_norm is None:
        return "the log has no grad norm"
    lo = step - cfg.recovery_window
    zeros = underflow_steps(cols, alarms, step)
    m = (cols.step >= lo) & (cols.step <= step) & np.isfinite(cols.grad_norm) & (cols.grad_norm > 0)
    if not m.any():
        if len(zeros):
            return (
                f"the grad norm was exactly 0 from step {int(zeros[0])} ({len(zeros)} logged "
                "rows) after the loss scale collapsed: the gradients underflowed to zero"
            )
        return f"no grad norm logged in the {cfg.recovery_window} steps before step {step}"
    g, s = cols.grad_norm[m], cols.step[m]
    k = int(np.argmax(g))
    led = [a for a in warning_chain(alarms, step, cfg) if a.kind == "grad_norm_alarm"]
    lead = (
        f"; the grad-norm alarm fired at step {led[0].step}, {step - led[0].step} steps before"
        if led
        else "; no grad-norm alarm before it"
    )
    return (
        f"over steps {int(s[0])}-{int(s[-1])} the grad norm went from {g[0]:.4g} to {g[-1]:.4g} "
        f"(median {np.median(g):.4g}, max {g[k]:.4g} at step {int(s[k])}){lead}"
    )


def underflow_steps(cols: Columns, alarms: list[Alarm], until: int) -> np.ndarray:
    """Steps up to `until` where the grad norm is exactly 0 after a loss-scale collapse, in a log
    that printed positive norms before it: gradients underflowed (an fp16 log that prints 0.000
    throughout simply does not log the norm)."""
    collapses = [a for a in alarms if a.kind == "loss_scale_collapse" and a.step <= until]
    if cols.grad_norm is None or not collapses:
        return np.array([], dtype=np.int64)
    first = collapses[0].step
    g = cols.grad_norm
    logged_before = ((cols.step < first) & np.isfinite(g) & (g > 0)).any()
    if not logged_before:
        return np.array([], dtype=np.int64)
    return cols.step[(cols.step >= first) & (cols.step <= until) & (g == 0)]


def divergence_causes(
    cols: Columns,
    div: Divergence,
    alarms: list[Alarm],
    steps: np.ndarray,
    loss: np.ndarray,
    cfg: TriageConfig,
) -> list[dict[str, object]]:
    """The usual causes of a rise, in the order to check them, each with its evidence."""
    chain = warning_chain(alarms, div.step, cfg)
    surges = [a for a in chain if a.kind == "grad_norm_alarm" and a.step < div.step]
    return [
        lr_cause(cols, div),
        clipping_cause(cols, surges),
        loss_scale_cause(cols, alarms, div),
        device_cause(steps, loss, div.step, div.step, cfg),
    ]


def lr_cause(cols: Columns, div: Divergence) -> dict[str, object]:
    """Learning rate too high (diverging at peak lr), or no warmup."""
    if cols.lr is None:
        return cause(LR, None, "needs the lr field")
    lr = cols.lr[np.isfinite(cols.lr)]
    if not len(lr) or float(np.max(lr)) <= 0:  # nothing to compare against (a hand-made log)
        return cause(LR, None, "the lr field holds no positive finite value")
    lr_on = cols.at(cols.lr, div.step) or float("nan")
    lr_max = float(np.max(lr))
    if lr[0] >= 0.5 * lr_max and cols.step[0] <= 10:
        return cause(
            LR,
            True,
            f"no warmup: the lr starts at {lr[0]:.3g}, already {lr[0] / lr_max:.0%} of "
            f"its peak {lr_max:.3g}",
        )
    near_peak = lr_on >= 0.9 * lr_max
    if near_peak and lr[0] >= 0.5 * lr_max:
        return cause(
            LR,
            None,
            f"lr at the onset is {lr_on:.3g}, {lr_on / lr_max:.0%} of the peak this log shows, "
            f"but the log starts at step {int(cols.step[0])} with the lr already there: the "
            "schedule's warmup and peak are not in view",
        )
    return cause(
        LR,
        bool(near_peak),
        f"lr at the onset is {lr_on:.3g}, {lr_on / lr_max:.0%} of its peak {lr_max:.3g}"
        + (
            " (a rise at peak lr, e.g. right after warmup, points at the lr)"
            if near_peak
            else " (well below peak: the lr alone is unlikely)"
        ),
    )


def clipping_cause(cols: Columns, surges: list[Alarm]) -> dict[str, object]:
    """Clipping misconfigured: huge norms in bursts while the update was not bounded. A slow,
    sustained rise is a warning, not a clipping fault."""
    if cols.grad_norm is None:
        return cause(CLIP, None, "needs the grad norm")
    bursts = [a for a in surges if a.mode == "burst"]
    if not bursts:
        if surges:
            return cause(
                CLIP,
                None,
                f"the grad norm rose steadily to {surges[0].ratio:.1f}x its reference from step "
                f"{surges[0].step} (a sustained rise, not bursts): a warning, not a clip fault",
            )
        return cause(CLIP, False, "no grad-norm surge before the rise")
    worst = max(bursts, key=lambda a: a.ratio)
    count = f"{len(bursts)} grad-norm bursts" if len(bursts) > 1 else "a grad-norm burst"
    return cause(
        CLIP,
        True,
        f"{count} from step {bursts[0].step}, up to {worst.ratio:.1f}x the baseline (raw norm "
        f"{worst.worst:.4g}); with clipping on, the update stays bounded, so check --clip-grad "
        "(0 disables it; Megatron logs the norm before clipping)",
    )


def loss_scale_cause(cols: Columns, alarms: list[Alarm], div: Divergence) -> dict[str, object]:
    """The fp16 loss scale collapsed anywhere before the loss left its trend and had not
    recovered by then: updates underflow to zero, the loss goes flat, then wanders. However
    long the flat stretch, the collapse explains it."""
    if cols.loss_scale is None:
        return cause(LOSS_SCALE, None, "no loss scale logged (bf16 run?)")
    collapses = [a for a in alarms if a.kind == "loss_scale_collapse" and a.step < div.step]
    scale_on = cols.at(cols.loss_scale, div.step)
    held = [a for a in collapses if scale_on is not None and scale_on * 2 <= a.baseline]
    if not held:
        with_it = [a for a in alarms if a.kind == "loss_scale_collapse" and a.step == div.step]
        if with_it:  # the overflow of the event's own step: a consequence, not a cause
            return cause(
                LOSS_SCALE,
                None,
                f"the loss scale fell on the event's own logged step ({with_it[0].detail}): "
                "the overflow of the event itself, not a collapse before it",
            )
        return cause(LOSS_SCALE, False, "the loss scale held (or recovered) before the rise")
    first = held[0]
    zeros = underflow_steps(cols, alarms, div.end_step)
    under = (
        f"; the grad norm is exactly 0 on {len(zeros)} logged rows from step {int(zeros[0])}: "
        "gradients underflowed to all-zero updates"
        if len(zeros)
        else ""
    )
    return cause(
        LOSS_SCALE,
        True,
        f"{first.detail}; {div.step - first.step} steps before the loss left its trend the "
        f"scale was still {scale_on:g}{under}",
    )


def noise_ratio(steps: np.ndarray, loss: np.ndarray, start: int, after: int, rows: int) -> float:
    """Step-to-step noise (MAD of first differences: blind to level and trend) of the `rows`
    rows after `after` over the `rows` rows before `start`; nan with too few rows."""
    i0, i1 = int(np.searchsorted(steps, start)), int(np.searchsorted(steps, after, side="right"))
    pre, post = np.diff(loss[max(0, i0 - rows) : i0]), np.diff(loss[i1 : i1 + rows])
    if len(pre) < 8 or len(post) < 8:
        return float("nan")
    a = float(np.median(np.abs(pre - np.median(pre))))
    b = float(np.median(np.abs(post - np.median(post))))
    return b / a if a > 0 else float("nan")


def device_cause(
    steps: np.ndarray, loss: np.ndarray, start: int, after: int, cfg: TriageConfig
) -> dict[str, object]:
    """A device first only on device evidence: a level noisier after the event than before."""
    ratio = noise_ratio(steps, loss, start, after, cfg.window_rows)
    if np.isfinite(ratio) and ratio >= NOISIER:
        return cause(
            DEVICE,
            True,
            f"the loss is {ratio:.1f}x noisier step to step after step {after} than before it "
            "(a device computing wrong adds noise): compare per-rank losses, check DCGM/ECC "
            "logs, rerun the step on other nodes",
        )
    said = f"the noise level is unchanged ({ratio:.1f}x)" if np.isfinite(ratio) else "no noise"
    return cause(
        DEVICE,
        None,
        f"no device evidence in the log ({said}; no per-rank losses): a faulty device shows as "
        "divergence or per-rank disagreement, not a clean step; per-rank logs or a rerun of the "
        "step on other nodes would tell",
    )


def lasting_data_cause(excess: float, against: str, base: dict[str, object]) -> dict[str, object]:
    """A spike that has not come back is the data (the field's rule), whatever `base` (the
    stage check) could tell."""
    return cause(
        DATA,
        True,
        f"a lasting step: the loss settled {excess:+.3g} above {against}; a spike that does not "
        "come back is data (a glitch, a hard batch or a bf16 overflow comes back). "
        + str(base["evidence"]),
    )


def numeric_cause(preceded: list[Alarm]) -> dict[str, object]:
    """What a spike that came back was: a numerical event, named for what preceded it."""
    kinds = {a.kind for a in preceded}
    if "loss_scale_collapse" in kinds:
        what = "an fp16 overflow burst (the loss scale fell with it)"
    elif "grad_norm_alarm" in kinds:
        what = (
            "one huge gradient (in bf16 an accumulation overflow; clipping is the guard), "
            "announced by the grad-norm alarm"
        )
    else:
        what = "a batch of hard examples or a transient hardware glitch (one bad gradient)"
    return cause(
        f"numerical: {what}",
        True,
        "the loss came back to its trajectory: the data is fine; nothing to do unless such "
        "spikes keep recurring",
    )


def rank_causes(causes: list[dict[str, object]]) -> list[dict[str, object]]:
    """Supported causes first, then those the log cannot tell, then those it rules out; the
    order within each is the order to check them (a stable sort)."""
    rank = {True: 0, None: 1, False: 2}
    return sorted(causes, key=lambda c: rank[c["supported"]])  # type: ignore[index]
