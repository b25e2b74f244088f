"""How sure the report is, in one line per side of the evidence.

An engineer deciding between a rebuild and a restart wants to know how much rests on the blame:
- data side: how unusual the culprit is in the window (over-representation, or newness at a
  mixture switch) and how dirty (its flagged rate against the rest of the window's, or against
  the baseline's when only that test makes it dirty: cluster/verdict.py);
- model side: what the checkpoint's losses said about it, when a checkpoint was rescored;
- the loss: how much of the window's loss excess the culprit's per-iteration share explains.

And when no culprit is named: whether the window still holds dirty data (then the spike is not
called "likely numerical"). `loss_explained` runs when the report is built (SpikeReport.loss_fit);
the line functions only word what the report holds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from forensics.cluster.verdict import background_rate, dirty_against
from forensics.report.control_view import clean_control_lines, unexplained_lines
from forensics.report.why_shares import blend_lines

STRONG_P = 1e-10  # over-representation this significant counts as strong evidence
STRONG_RATIO = 10.0  # flagged rate at least this multiple of the rest of the window's
MIN_LOSS_POINTS = 10  # logged window iterations needed to say anything about the loss
NOISE_SIGMAS = 3.0  # loss within this many robust sigmas of the clean level is noise, no excess


def data_grade(top: dict[str, Any]) -> str:
    """strong / moderate / weak, from the culprit's two halves of the evidence."""
    rest = max(background_rate(top), 1e-3)
    dirt = float(top.get("flagged_rate") or 0.0) / rest
    unusual = float(top.get("p_value") or 1.0) < STRONG_P or bool(top.get("new_in_window"))
    if unusual and dirt >= STRONG_RATIO and float(top.get("flagged_rate") or 0) >= 0.5:
        return "strong"
    return "moderate" if dirt >= STRONG_RATIO or unusual else "weak"


def loss_explained(
    loss: pl.DataFrame | None, share: pl.DataFrame | None, window: tuple[int, int]
) -> dict[str, Any] | None:
    """How the window's loss excess lines up with the culprit, or None without a log (or with
    fewer than MIN_LOSS_POINTS logged window iterations).

    excess = loss - (the median loss of the window's iterations that hold none of the culprit,
    the level the run was at without it, + NOISE_SIGMAS robust sigmas of their noise), positive
    part. `after_onset`: the share of the excess
    in iterations from the culprit's first appearance on (timing: a spike before it arrived is
    not its doing). `r2`: of a least-squares line excess ~ a + b x share over the window (does
    the excess track the batch's culprit share, or is the damage cumulative?); 0 when b <= 0,
    None when the share does not vary.
    """
    if loss is None or share is None or share.height == 0:
        return None
    joined = (
        share.select(pl.col("iteration").cast(pl.Int64), "share")
        .join(loss.select(pl.col("step").cast(pl.Int64).alias("iteration"), "loss"), on="iteration")
        .filter(pl.col("iteration").is_between(*window) & pl.col("loss").is_finite())
        .sort("iteration")
    )
    if joined.height < MIN_LOSS_POINTS:
        return None
    x, y = joined["share"].to_numpy(), joined["loss"].to_numpy()
    its = joined["iteration"].to_numpy()
    clean = y[x == 0] if (x == 0).sum() >= MIN_LOSS_POINTS else y
    level = np.median(clean)
    noise = NOISE_SIGMAS * 1.4826 * np.median(np.abs(clean - level))  # robust sigma (MAD)
    excess = np.maximum(0.0, y - level - noise)
    held = np.flatnonzero(x > 0)
    onset = int(its[held[0]]) if held.size else None
    total = float(excess.sum())
    after = float(excess[its >= onset].sum()) / total if onset is not None and total else None
    r2 = None
    if np.ptp(x) > 0 and np.ptp(y) > 0:
        b, a = np.polyfit(x, y, 1)
        residual = y - (a + b * x)
        fit = 1.0 - float(residual @ residual) / float(((y - y.mean()) ** 2).sum())
        r2 = max(0.0, fit) if b > 0 else 0.0
    return {"after_onset": after, "onset": onset, "r2": r2, "iterations": int(joined.height)}


def loss_text(fit: dict[str, Any] | None) -> str:
    """The loss line, in words."""
    if fit is None:
        return "loss: not compared (no training log, or too few logged window iterations)"
    parts = []
    if fit["after_onset"] is not None:
        parts.append(
            f"{100 * fit['after_onset']:.0f}% of the window's loss excess comes at or after its "
            f"first document (iteration {fit['onset']})"
        )
    if fit["r2"] is not None:
        parts.append(
            f"its per-iteration share explains {100 * fit['r2']:.0f}% of the excess's variance "
            f"(R², {fit['iterations']} logged iterations)"
            + (": the damage builds up, it does not follow each batch" if fit["r2"] < 0.2 else "")
        )
    return "loss: " + ("; ".join(parts) or "no excess to attribute")


def model_side(report: Any, top: dict[str, Any]) -> str:
    """The checkpoint's word on the culprit, or that none was asked."""
    view = report.model
    if not view:
        return "model: not measured (no checkpoint rescored)"
    for row in view.get("clusters") or []:
        if row.get("id") == top["id"]:
            z = row.get("loss_z")
            shown = f", loss z {z:+.1f}" if isinstance(z, int | float) and np.isfinite(z) else ""
            return f"model: {row.get('combined')}{shown}"
    return "model: its documents were not among the rescored samples"


def confidence_lines(report: Any) -> list[tuple[str, str]]:
    """The first screen's HOW SURE line(s); none without a culprit (see no_culprit_lines)."""
    top = report.culprit
    if top is None:
        return []

    grade = data_grade(top)
    how = "over-represented"
    if top.get("new_in_window"):
        how = "new at a mixture switch" if report.switch_before_spike else "new in the window"
    where = "the baseline" if dirty_against(top) == "the baseline" else "the rest of the window"
    data = (
        f"data: {grade} ({how}, {100 * float(top.get('flagged_rate') or 0):.0f}% flagged against "
        f"{100 * background_rate(top):.1f}% in {where})"
    )
    if top.get("named_by") == "model":
        data = (
            f"data: no scorer flags it ({100 * float(top.get('flagged_rate') or 0):.0f}% flagged "
            f"against {100 * background_rate(top):.1f}% in {where}); {how}: the model named it"
        )
    loss = loss_text(report.loss_fit)
    return [("HOW SURE", data), ("", model_side(report, top)), ("", loss)]


def no_culprit_lines(report: Any, advice: str) -> list[tuple[str, str]]:
    """NO CULPRIT, "the data looks like the baseline" (the clean control: control_view),
    when no dirty group is in the window and no group's change is unexplained; NO CULPRIT with
    the unexplained groups and the --checkpoint command when some changed unflagged; otherwise
    the dirty groups are named and the spike is not cleared."""
    dirty = report.dirty_groups
    if dirty is None or dirty.height == 0:
        if getattr(report, "unexplained", None) is not None and report.unexplained.height:
            changed = (
                "no group is dirtier than its background, but the window changed where no "
                "scorer looks (nothing is skipped or removed on the data side's word alone)"
            )
            return [("NO CULPRIT", changed), *unexplained_lines(report)]
        if getattr(report, "control", None) is None:  # a report built without the tables
            return [("NO CULPRIT", advice)]
        return clean_control_lines(report)
    r = dirty.row(0, named=True)
    name = f"{r['facet']}={r['key']}" if r.get("kind") == "source" else f"embedding {r['id']}"
    return [
        (
            "NO CULPRIT",
            f"no group is both over-represented and dirty, but the window holds dirty data: "
            f"{name} ({100 * r['flagged_rate']:.0f}% flagged, {100 * r['window_share']:.1f}% of "
            f"the window; {dirty.height} dirty group(s) in all). Not cleared as numerical: "
            "inspect it (report.html) or blame it with --culprit " + str(r["id"]),
        ),
        *[("", line) for line in blend_lines(r, report.step, report.window, report.stage_starts)],
    ]
