"""What the report's plots share: the figure and its PNG, escaped labels, the culprit-share series
(the window's, and past the spike the exposure's), the restart marks (spike, rollback, skip
ranges, the culprit's first document) and label placement without overlaps.

matplotlib's object API (Figure + Agg canvas), not pyplot: no global state, no display needed.
Every line or span drawn here carries a legend label; labels from data are escaped (`$`).
"""

from __future__ import annotations

import io
from typing import Any

import polars as pl

from forensics.report.contents import SpikeReport
from forensics.report.incident import remaining_share
from forensics.safe_text import excerpt

DPI = 100
# Okabe & Ito's colour-blind-safe palette (Okabe, Ito 2008, "Color Universal Design"): every
# colour the plots draw with is one of these, black or a grey, so no two marks are told apart by
# red against green alone; lines also differ by style (solid, dashed, dotted, dash-dot).
OKABE_ITO = {
    "orange": "#E69F00",
    "sky_blue": "#56B4E9",
    "bluish_green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish_purple": "#CC79A7",
}
GREYS = ("#000000", "#222222", "#444444", "#777777", "#999999", "#bbbbbb", "#ffffff")
SHARE_COLOUR = OKABE_ITO["vermillion"]  # the culprit
SPIKE_COLOUR = "#222222"
ROLLBACK_COLOUR = OKABE_ITO["bluish_green"]
SKIP_COLOUR = OKABE_ITO["sky_blue"]
FIRST_COLOUR = OKABE_ITO["vermillion"]
PAST_HATCH = "////"


def new_figure(width: float = 10.0, height: float = 3.4) -> Any:
    """A Figure with its own Agg canvas (so a renderer exists before saving: label placement
    measures text) and constrained layout."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def label(text: str, max_chars: int = 80) -> str:
    """Legend and annotation text from data, with `$` escaped so mathtext never parses it."""
    return excerpt(text, max_chars).replace("$", r"\$")


def past_share(report: SpikeReport, last: int) -> pl.DataFrame | None:
    """The culprit's share of each iteration after the spike up to `last` (Incident.culprit_ahead),
    or None when the report has none there."""
    ahead = report.incident.culprit_ahead if report.incident is not None else None
    if ahead is None or ahead.height == 0:
        return None
    part = ahead.filter(pl.col("iteration").is_between(report.step + 1, last))
    return part if part.height else None


def _edges(iterations: Any) -> Any:
    """Bin edges for one bar per iteration (iteration i covers i-0.5..i+0.5; the series are
    contiguous: exposure and replay tables hold every iteration of their span)."""
    import numpy as np

    return np.append(iterations - 0.5, iterations[-1] + 0.5)


def draw_share(ax: Any, report: SpikeReport, last: int) -> float:
    """The culprit share in % on `ax`: solid over the replayed window, hatched and lighter past
    the spike (to `last`), one bar per iteration. Returns the highest share drawn, in %."""
    top = 0.0
    share = report.culprit_share
    if share is not None and share.height:
        it, pct = share["iteration"].to_numpy(), share["share"].to_numpy() * 100
        ax.stairs(pct, _edges(it), fill=True, color=SHARE_COLOUR, alpha=0.35, lw=0,
                  label="culprit share of the iteration's samples (window)")  # fmt: skip
        ax.stairs(pct, _edges(it), color=SHARE_COLOUR, lw=1)
        top = float(pct.max())
    past = past_share(report, last)
    if past is not None:
        it, pct = past["iteration"].to_numpy(), past["share"].to_numpy() * 100
        rest = remaining_share(report.incident.culprit_ahead)  # type: ignore[union-attr]
        ax.stairs(pct, _edges(it), fill=True, facecolor="none", edgecolor=SHARE_COLOUR,
                  hatch=PAST_HATCH, alpha=0.45, lw=0,
                  label=f"culprit share past the spike (block list; {100 * rest:.1f}% of "
                        "the rest of the run)")  # fmt: skip
        ax.stairs(pct, _edges(it), color=SHARE_COLOUR, lw=0.7, alpha=0.45)
        top = max(top, float(pct.max()))
    return top


def skip_text(ranges: list[list[int]]) -> str:
    total = sum(b - a + 1 for a, b in ranges)
    if len(ranges) == 1:
        a, b = ranges[0]
        return f"skipped iterations {a}-{b} ({total:,})" if a != b else f"skipped iteration {a}"
    return f"skipped iterations: {len(ranges)} ranges, {total:,} iterations"


def mark_restart(
    ax: Any,
    report: SpikeReport,
    first_document: bool = True,
    verdict: str | None = None,
    view: tuple[float, float] | None = None,
) -> None:
    """The spike (with triage's `verdict` when known), the rollback checkpoint, the skip ranges
    and (optionally) the culprit's first document as labelled lines and spans on `ax` (a
    checkpoint is the state after its iteration; a skipped iteration i covers i-0.5..i+0.5).
    With `view` (first, last iteration shown) a line outside it is not drawn, so the legend
    names nothing the plot does not show."""
    lo, hi = view if view is not None else (float("-inf"), float("inf"))
    ranges = report.skip.iterations if report.skip is not None else []
    ranges = [[a, b] for a, b in ranges if b >= lo and a <= hi]
    for k, (a, b) in enumerate(ranges):
        ax.axvspan(a - 0.5, b + 0.5, color=SKIP_COLOUR, alpha=0.25, lw=0, zorder=0,
                   label=skip_text(ranges) if k == 0 else None)  # fmt: skip
    if report.rollback_iteration is not None and lo <= report.rollback_iteration <= hi:
        ax.axvline(report.rollback_iteration, color=ROLLBACK_COLOUR, lw=1.6,
                   label=f"rollback: checkpoint {report.rollback_iteration}")  # fmt: skip
    first = report.culprit_first_iteration
    if first_document and first is not None and lo <= first <= hi:
        ax.axvline(report.culprit_first_iteration, color=FIRST_COLOUR, ls=":", lw=1.2,
                   label=f"culprit's first document: iteration "
                         f"{report.culprit_first_iteration}")  # fmt: skip
    said = f" (triage: {verdict})" if verdict else ""
    ax.axvline(report.step, color=SPIKE_COLOUR, ls="--", lw=1,
               label=f"spike: iteration {report.step}{said}")  # fmt: skip


def mark_spike_loss(ax: Any, report: SpikeReport, loss: pl.DataFrame) -> None:
    """The spike's own loss ringed on the loss axes and named in the legend (a text beside it
    would lie over the curve or the share)."""
    at = loss.filter(pl.col("step") == report.step)
    if at.height:
        y = float(at["loss"][0])
        ax.plot([report.step], [y], "o", color=SPIKE_COLOUR, ms=6, mfc="none", mew=1.5, ls="none",
                label=f"loss at the spike: {y:.2f}")  # fmt: skip


def legend_below(fig: Any, axes: list[Any], ncols: int = 3) -> Any:
    """One legend for every labelled artist of `axes`, under the plot (never over the data)."""
    handles, labels = [], []
    for ax in axes:
        h, lab = ax.get_legend_handles_labels()
        handles += h
        labels += lab
    return fig.legend(handles, labels, loc="outside lower center", ncols=ncols, fontsize=8,
                      frameon=False)  # fmt: skip


# label placement ----------------------------------------------------------------------------

# Offsets in points tried in order around each label's anchor: the anchor first, then rings.
_DIRECTIONS = ((0, 1), (0, -1), (1, 0), (-1, 0), (1, 1), (-1, 1), (1, -1), (-1, -1))
RINGS = (10, 20, 32, 46, 62)
OFFSETS = [(0, 0)] + [(dx * r, dy * r * 0.6) for r in RINGS for dx, dy in _DIRECTIONS]
LABEL_GAP = 3  # pixels kept free around each label's text


def place_labels(ax: Any, items: list[tuple[str, float, float]], obstacles: list[Any]) -> list[Any]:
    """Annotate `items` (text, x, y in data coordinates) in order, each at the first offset from
    OFFSETS where its box overlaps no label placed before it nor an `obstacles` box (display
    coordinates) and stays inside the axes, with a thin line to its anchor when moved; a label
    with no such place is left out. The figure must be drawn (layout done) first and its layout
    then frozen, so the boxes stay where they were measured. Returns the annotations placed."""
    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    taken = list(obstacles)
    placed = []
    style = {"textcoords": "offset points", "ha": "center", "va": "center", "fontsize": 7,
             "zorder": 6, "bbox": {"boxstyle": "round,pad=0.2", "fc": "#ffffff", "ec": "#999999",
                                   "lw": 0.5, "alpha": 0.85}}  # fmt: skip
    for text, x, y in items:
        probe = ax.annotate(label(text, 48), (x, y), xytext=(0, 0), **style)
        spot = None
        for dx, dy in OFFSETS:
            probe.xyann = (dx, dy)
            box = probe.get_window_extent(renderer).padded(LABEL_GAP)
            inside = frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1)
            if inside and not any(box.overlaps(other) for other in taken):
                spot = (dx, dy)
                taken.append(box)
                break
        probe.remove()
        if spot is None:
            continue
        arrow = {"arrowstyle": "-", "color": "#777777", "lw": 0.6} if spot != (0, 0) else None
        placed.append(ax.annotate(label(text, 48), (x, y), xytext=spot, arrowprops=arrow, **style))
    return placed


def steps_past(report: SpikeReport, fraction: float, least: int) -> int:
    """How many iterations after the spike a plot shows: `fraction` of the window, at least
    `least`."""
    length = report.window[1] - report.window[0] + 1
    return max(least, round(length * fraction))


TAG_ROWS = 6


def tag_lines(ax: Any, tags: list[tuple[float, str, str]]) -> list[Any]:
    """A short text over the axes' top edge for each vertical line (x, text, colour), centred on
    it and stacked in rows where it would overlap an earlier one, so lines an iteration apart
    (a rollback checkpoint and a stage switch) stay told apart. Call after set_xlim; put the
    title in fig.suptitle (constrained layout keeps it above the tags). Returns the texts."""
    renderer = ax.figure.canvas.get_renderer()
    lo, hi = sorted(ax.get_xlim())
    taken: list[Any] = []
    placed = []
    for x, text, colour in sorted(tags, key=lambda t: t[0]):
        if not lo <= x <= hi:
            continue
        for row in range(TAG_ROWS):
            tag = ax.annotate(text, (x, 1.0), xycoords=ax.get_xaxis_transform(),
                              xytext=(0, 2 + 10 * row), textcoords="offset points",
                              ha="center", va="bottom", fontsize=7, color=colour)  # fmt: skip
            box = tag.get_window_extent(renderer).padded(2)
            if not any(box.overlaps(other) for other in taken):
                taken.append(box)
                placed.append(tag)
                break
            tag.remove()
    return placed


def restart_tags(report: SpikeReport, first_document: bool = True) -> list[tuple[float, str, str]]:
    """tag_lines' tags for mark_restart's lines."""
    tags = [(float(report.step), f"spike {report.step}", SPIKE_COLOUR)]
    if report.rollback_iteration is not None:
        tags.append((float(report.rollback_iteration), f"rollback {report.rollback_iteration}",
                     ROLLBACK_COLOUR))  # fmt: skip
    if first_document and report.culprit_first_iteration is not None:
        first = report.culprit_first_iteration
        tags.append((float(first), f"culprit from {first}", FIRST_COLOUR))
    return tags
