"""The incident timeline: one figure with the whole story around the spike, for the engineer who
has to decide the restart. The loss (when a log is configured), triage's grad-norm alarms and
loss-scale collapses, the data-stage switches, the checkpoints on disk, the rollback checkpoint,
the skipped iterations, the spike, and the culprit's share of each iteration (solid over the
replayed window, hatched past the spike, where the exposure says the culprit goes on).

Every line, span and marker is named in the legend under the plot. matplotlib's object API, as in
forensics.report.plots; nothing here comes from document text.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from forensics.report.contents import SpikeReport
from forensics.report.plot_base import (
    OKABE_ITO,
    SHARE_COLOUR,
    draw_share,
    legend_below,
    mark_restart,
    mark_spike_loss,
    new_figure,
    png,
    restart_tags,
    steps_past,
    tag_lines,
)

AFTER_SPIKE = 1.0  # the timeline runs one window's length past the spike (less if the run ends)
MIN_STEPS_PAST_SPIKE = 20
STAGE_COLOUR = OKABE_ITO["reddish_purple"]
ALARM_COLOURS = {"grad_norm_alarm": OKABE_ITO["orange"], "loss_scale_collapse": OKABE_ITO["blue"]}
ALARM_WORDS = {"grad_norm_alarm": "grad-norm alarm", "loss_scale_collapse": "loss-scale collapse"}
CHECKPOINT_COLOUR = "#444444"


def timeline_span(report: SpikeReport) -> tuple[int, int]:
    """First and last iteration shown: from the window's start (or the rollback checkpoint, if
    earlier) to one window's length past the spike, cut where the log and the measured exposure
    both end (but always a few iterations past the spike, so its line is not on the frame)."""
    first = report.window[0]
    if report.rollback_iteration is not None:
        first = min(first, report.rollback_iteration)
    known = [report.step + MIN_STEPS_PAST_SPIKE]
    if report.loss is not None and report.loss.height:
        known.append(int(report.loss["step"].max()))
    incident = report.incident
    ahead = incident.culprit_ahead if incident is not None else None
    if ahead is not None and ahead.height:
        known.append(int(ahead["iteration"].max()))
    last = report.step + steps_past(report, AFTER_SPIKE, MIN_STEPS_PAST_SPIKE)
    if incident is not None and incident.last_iteration is not None:
        last = min(last, max(incident.last_iteration, report.step + 1))
    return first, min(last, max(known))


def mark_stages(ax: Any, starts: list[int], lo: int, hi: int) -> None:
    """Data-stage switches (a stage's first iteration; the run's first stage is no switch)."""
    shown = [s for s in starts if s > 1 and lo <= s <= hi]
    words = "data stage starts: " + ", ".join(str(s) for s in shown[:4])
    for k, start in enumerate(shown):  # zorder: over a rollback line one iteration before
        ax.axvline(start - 0.5, color=STAGE_COLOUR, ls="-.", lw=1.5, zorder=3,
                   label=words if k == 0 else None)  # fmt: skip


def mark_alarms(ax: Any, events: list[dict[str, Any]], lo: int, hi: int) -> None:
    """triage's grad-norm alarms and loss-scale collapses as shaded spans, each kind labelled."""
    for kind, colour in ALARM_COLOURS.items():
        spans = [(int(e["step"]), int(e.get("end_step") or e["step"]))
                 for e in events if e.get("kind") == kind]  # fmt: skip
        spans = [(a, b) for a, b in spans if b >= lo and a <= hi]
        for k, (a, b) in enumerate(spans):
            text = f"{ALARM_WORDS[kind]} (triage): {a}-{b}" if len(spans) == 1 else (
                f"{ALARM_WORDS[kind]}s (triage): {len(spans)}")  # fmt: skip
            ax.axvspan(a - 0.5, b + 0.5, facecolor=colour, alpha=0.15, hatch="..",
                       edgecolor=colour, lw=0, label=text if k == 0 else None)  # fmt: skip


def mark_checkpoints(ax: Any, checkpoints: list[int], lo: int, hi: int) -> None:
    """The checkpoints in view as ticks along the bottom edge (the state after the iteration)."""
    shown = [c for c in checkpoints if lo <= c <= hi]
    if not shown:
        return
    ax.plot(shown, [0.03] * len(shown), transform=ax.get_xaxis_transform(), ls="none",
            marker="^", ms=7, color=CHECKPOINT_COLOUR, clip_on=False,
            label=f"checkpoints on disk ({len(shown)} in view)")  # fmt: skip


def spike_verdict(events: list[dict[str, Any]], step: int) -> str | None:
    """triage's verdict on the spike at `step`, when its events hold one."""
    for e in events:
        if e.get("kind") == "spike" and int(e["step"]) == step and e.get("verdict"):
            return str(e["verdict"])
    return None


def timeline_figure(report: SpikeReport):
    """The incident timeline as a Figure (None without a loss or a culprit share to show)."""
    has_loss = report.loss is not None and report.loss.height > 0
    if not has_loss and (report.culprit_share is None or report.culprit_share.height == 0):
        return None
    lo, hi = timeline_span(report)
    fig = new_figure(11.0, 5.4)
    ax = fig.add_subplot()
    sx = ax.twinx()  # the culprit share, drawn under the loss and the marks
    ax.set_zorder(sx.get_zorder() + 1)
    ax.patch.set_visible(False)
    top = draw_share(sx, report, hi)
    sx.set_ylim(0, max(5.0, top * 1.1))
    sx.set_ylabel("culprit samples (% of iteration)", color=SHARE_COLOUR)
    if has_loss:
        loss = report.loss.filter(pl.col("step").is_between(lo, hi)).sort("step")  # type: ignore[union-attr]
        ax.plot(loss["step"].to_numpy(), loss["loss"].to_numpy(), color="#000000", lw=1,
                label="loss (training log)")  # fmt: skip
        mark_spike_loss(ax, report, loss)
        ax.set_ylabel("loss")
    else:
        ax.set_yticks([])
    incident = report.incident
    events = incident.events if incident is not None else []
    if incident is not None:
        mark_stages(ax, incident.stage_starts, lo, hi)
        mark_alarms(ax, events, lo, hi)
        mark_checkpoints(ax, incident.checkpoints, lo, hi)
    mark_restart(ax, report, first_document=False, verdict=spike_verdict(events, report.step),
                 view=(lo - 0.5, hi + 0.5))  # fmt: skip
    ax.set_xlim(lo - 0.5, hi + 0.5)
    ax.set_xlabel("iteration")
    starts = incident.stage_starts if incident is not None else []
    stages = [(s - 0.5, f"stage {s}", STAGE_COLOUR) for s in starts if s > 1]
    tag_lines(ax, restart_tags(report, first_document=False) + stages)
    a, b = report.window
    title = "Loss (left) and culprit share per iteration (right): "
    title += f"spike at {report.step}, window {a}-{b}"
    fig.suptitle(title)
    legend_below(fig, [ax, sx])
    return fig


def plot_timeline(report: SpikeReport) -> bytes | None:
    """The incident timeline as PNG bytes (see timeline_figure)."""
    fig = timeline_figure(report)
    return None if fig is None else png(fig)
