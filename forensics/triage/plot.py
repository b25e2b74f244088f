"""triage.png: the loss with its EMA, power-law fit and events; the grad norm with triage's
alarms shaded; the lr and the fp16 loss scale with its collapses shaded. Every curve, line and
span is named in its panel's legend, which sits outside the panel so it never covers a line;
each panel's title names what its axes show.

Colours are Okabe and Ito's colour-blind-safe palette (Okabe & Ito 2008, "Color Universal
Design"; Wong 2011, Nature Methods 8:441), and the spike verdicts differ by marker shape too.

matplotlib's object API (Figure + Agg canvas), not pyplot: no global state, no display needed.
Curve names come from the log and have `$` escaped (plot_label).
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from forensics.safe_text import excerpt
from forensics.triage.analyze import TriageResult

_MAX_PLOT_POINTS = 4000
# Okabe-Ito: distinguishable with every common colour-vision deficiency.
OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky_blue": "#56B4E9",
    "green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "purple": "#CC79A7",
}
_C = OKABE_ITO
_VERDICT_COLOR = {"benign": _C["green"], "malignant": _C["vermillion"], "undecided": _C["orange"]}
_VERDICT_MARKER = {"benign": "v", "malignant": "X", "undecided": "D"}
_GREY = "#7F7F7F"  # neutral: fits, blips, plateaus
_OTHER_CURVES = [_C["sky_blue"], _C["purple"], _C["yellow"], _C["green"], _C["orange"]]
_OUTSIDE = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "borderaxespad": 0.0}


def decimate(x: np.ndarray, y: np.ndarray, max_points: int = _MAX_PLOT_POINTS) -> tuple[Any, Any]:
    """Keep each bin's min and max so a million-point curve plots fast and keeps its spikes."""
    n = len(x)
    if n <= max_points:
        return x, y
    bins = max_points // 2
    edges = np.linspace(0, n, bins + 1).astype(int)
    keep = []
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        if b > a:
            seg = y[a:b]
            keep += [a + int(np.nanargmin(seg)), a + int(np.nanargmax(seg))]
    idx = np.unique(np.array(keep))
    return x[idx], y[idx]


def broken_at_gaps(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Insert a NaN where the log skips far more steps than usual, so the plot does not draw a
    straight line through iterations nobody logged."""
    if len(x) < 3:
        return x.astype(float), y.astype(float)
    d = np.diff(x)
    cut = np.flatnonzero(d > 5 * max(float(np.median(d)), 1.0)) + 1
    return np.insert(x.astype(float), cut, np.nan), np.insert(y.astype(float), cut, np.nan)


def _line(ax: Any, x: np.ndarray, y: np.ndarray, **kw: Any) -> None:
    """Plot a series: decimated when long, broken at gaps, with markers when sparse."""
    xs, ys = decimate(x, y)
    if len(xs) <= 120:
        kw.setdefault("marker", "o")
        kw.setdefault("markersize", 3)
        kw["alpha"] = max(kw.get("alpha", 1.0), 0.8)
    ax.plot(*broken_at_gaps(xs, ys), **kw)


def _has(result: TriageResult, col: str) -> bool:
    """The column holds a value worth a panel: the grad norm and the loss scale only when
    positive (fp16 logs print a grad norm of 0.000: not logged; both are drawn on log axes)."""
    t = result.table
    if col not in t.columns:
        return False
    values = t[col].drop_nulls()
    if col in ("grad_norm", "loss_scale"):
        values = values.filter(values > 0)
    return values.len() > 0


def triage_figure(result: TriageResult) -> Any:
    """Loss with EMA, power law and events; grad norm with alarms; lr and loss scale."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    has_grad = _has(result, "grad_norm")
    has_lr = _has(result, "lr") or _has(result, "loss_scale")
    panels = 1 + has_grad + has_lr
    fig = Figure(figsize=(13, 3.4 + 2.2 * (panels - 1)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(
        panels, 1, sharex=True, squeeze=False,
        gridspec_kw={"height_ratios": [3] + [1.4] * (panels - 1)},
    )  # fmt: skip
    _plot_loss(axes[0][0], result)
    row = 1
    if has_grad:
        _plot_grad_norm(axes[row][0], result)
        row += 1
    if has_lr:
        _plot_lr_and_loss_scale(axes[row][0], result)
    axes[-1][0].set_xlabel("iteration")
    status = f"triage: {result.summary['status']}  ({event_counts(result)})"
    fig.suptitle(plot_label(status, 200), fontsize=11)
    return fig


def render_png(result: TriageResult) -> bytes:
    """triage.png's bytes (see triage_figure)."""
    buf = io.BytesIO()
    triage_figure(result).savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def plot_label(name: str, max_chars: int = 40) -> str:
    """A curve name as matplotlib shows it literally: `$` would start mathtext (an unpaired one
    crashes the draw, a pair renders as math), so it is escaped."""
    return excerpt(name, max_chars).replace("$", r"\$")


def _plot_loss(ax: Any, result: TriageResult) -> None:
    """The loss panel: every curve, and the main curve's EMA, fit and events."""
    for k, (name, c) in enumerate(result.curves.items()):
        if len(c.steps) == 0:
            continue
        main = k == 0
        _line(
            ax,
            c.steps,
            c.loss,
            lw=0.6,
            alpha=0.45 if main else 0.35,
            color=_C["blue"] if main else _OTHER_CURVES[(k - 1) % len(_OTHER_CURVES)],
            label=plot_label(name),
        )
        if main:
            _mark_main_curve(ax, c)
        else:
            _mark_other_curve(ax, c, _OTHER_CURVES[(k - 1) % len(_OTHER_CURVES)])
    _mark_incidents(ax, result)
    _set_loss_ylim(ax, result)
    ax.set_ylabel("loss")
    ax.legend(fontsize=8, framealpha=0.9, **_OUTSIDE)
    ax.set_title("loss by iteration: its EMA, power-law fit and events", fontsize=10)


def _mark_other_curve(ax: Any, c: Any, color: str) -> None:
    """A per-domain curve's spikes (peaks, in the curve's colour, the verdict's marker) and its
    divergence onset: every curve's events are on the plot."""
    for s in c.spikes:
        if not s.blip:
            ax.scatter([s.peak_step], [s.peak_loss], marker=_VERDICT_MARKER[s.verdict], s=40,
                       color=color, zorder=5, edgecolors=_C["black"], linewidths=0.4)  # fmt: skip
    if c.divergence is not None:
        ax.axvline(c.divergence.step, color=color, lw=0.8, ls=":")


def _mark_incidents(ax: Any, result: TriageResult) -> None:
    """Name each per-domain incident at its onset: one domain alone, or every domain at once."""
    for e in result.events:
        scope = e.get("scope")
        if scope in ("one domain", "all domains"):
            text = f"{e['domain']} alone: its data" if scope == "one domain" else "all domains"
            ax.annotate(plot_label(text), (e["step"], 1.0), xycoords=("data", "axes fraction"),
                        xytext=(3, -12), textcoords="offset points", fontsize=8,
                        color=_C["vermillion"])  # fmt: skip


def _mark_main_curve(ax: Any, c: Any) -> None:
    """EMA, power-law fit, spikes, nan/missing steps, blips, divergence and plateaus."""
    _line(ax, c.steps, c.ema, lw=1.6, color=_C["black"], label="EMA", marker=None)
    if c.fit is not None:
        fs = c.steps[c.steps >= c.fit.from_step]
        ax.plot(
            fs,
            c.fit.predict(fs),
            "--",
            lw=1,
            color=_GREY,
            label=f"power law (exp {c.fit.exponent:.3f})",
        )
    named: set[str] = set()  # each verdict's marker and line named once in the legend
    for s in c.spikes:
        if s.blip:
            continue
        color = _VERDICT_COLOR[s.verdict]
        first = s.verdict not in named
        named.add(s.verdict)
        ax.scatter([s.peak_step], [s.peak_loss], marker=_VERDICT_MARKER[s.verdict], s=50,
                   color=color, zorder=5, edgecolors=_C["black"], linewidths=0.4,
                   label=f"{s.verdict} spike: peak" if first else None)  # fmt: skip
        if s.verdict != "benign":  # benign ones need no line across the plot
            ax.axvline(s.onset_step, color=color, lw=0.9, alpha=0.8,
                       ls="-" if s.verdict == "malignant" else "--",
                       label=f"{s.verdict} spike: onset" if first else None)  # fmt: skip
    if len(c.bad_steps):
        ax.scatter(
            c.bad_steps[:2000],
            np.full(min(len(c.bad_steps), 2000), 1.0),
            transform=ax.get_xaxis_transform(),
            marker="x",
            color=_C["vermillion"],
            s=30,
            zorder=6,
            label="loss nan / missing",
            clip_on=False,
        )
    blips = c.blips
    if blips:
        ax.scatter(
            [b.peak_step for b in blips],
            [b.peak_loss for b in blips],
            marker=".",
            s=12,
            color=_GREY,
            zorder=4,
            label=f"{len(blips)} one-step blips",
        )
    if c.divergence is not None:
        ax.axvspan(
            c.divergence.step,
            c.divergence.end_step,
            color=_C["vermillion"],
            alpha=0.12,
            hatch="//",
            label="divergence",
        )
    for k, climb in enumerate(c.climbs):
        ax.axvspan(climb.step, climb.end_step, color=_C["orange"], alpha=0.12,
                   label="slow climb" if k == 0 else None)  # fmt: skip
    for k, p in enumerate(c.plateaus):
        ax.axvspan(p.step, p.end_step, color=_GREY, alpha=0.15,
                   label="plateau" if k == 0 else None)  # fmt: skip


def _plot_grad_norm(gx: Any, result: TriageResult) -> None:
    """The grad-norm panel (log scale) with the EMA alarms shaded."""
    t = result.table.select("step", "grad_norm").drop_nulls()
    t = t.filter(t["grad_norm"] > 0)
    _line(gx, t["step"].to_numpy(), t["grad_norm"].to_numpy(), lw=0.7, color=_C["purple"],
          label="grad norm")  # fmt: skip
    if t.height:
        gx.set_yscale("log")
    alarms = [a for a in result.alarms if a.kind == "grad_norm_alarm"]
    for k, a in enumerate(alarms):
        gx.axvspan(a.step, max(a.end_step, a.step + 1), color=_C["vermillion"], alpha=0.25,
                   label="grad-norm alarm (EMA over its baseline)" if k == 0 else None)  # fmt: skip
    gx.set_ylabel("grad norm (log)")
    gx.set_title("grad norm by iteration (log scale): alarms shaded", fontsize=10)
    gx.legend(fontsize=8, framealpha=0.9, **_OUTSIDE)


def _plot_lr_and_loss_scale(lx: Any, result: TriageResult) -> None:
    """The lr panel, with the fp16 loss scale on a second axis and its collapses shaded; one
    legend for both axes."""
    axes = [lx]
    if _has(result, "lr"):
        t = result.table.select("step", "lr").drop_nulls()
        _line(lx, t["step"].to_numpy(), t["lr"].to_numpy(), color=_C["green"], lw=1, label="lr")
        lx.set_ylabel("learning rate")
    if _has(result, "loss_scale"):
        sx = lx.twinx()
        axes.append(sx)
        t = result.table.select("step", "loss_scale").drop_nulls()
        t = t.filter(t["loss_scale"] > 0)
        _line(sx, t["step"].to_numpy(), t["loss_scale"].to_numpy(), color=_C["orange"], lw=1,
              drawstyle="steps-post", label="loss scale (right axis)")  # fmt: skip
        if t.height:
            sx.set_yscale("log", base=2)
        sx.set_ylabel("loss scale (log2)")
        collapses = [a for a in result.alarms if a.kind == "loss_scale_collapse"]
        for k, a in enumerate(collapses):
            lx.axvspan(a.step, max(a.end_step, a.step + 1), color=_C["orange"], alpha=0.25,
                       label="loss-scale collapse" if k == 0 else None)  # fmt: skip
    handles, labels = [], []
    for ax in axes:
        h, lab = ax.get_legend_handles_labels()
        handles, labels = handles + h, labels + lab
    scale = len(axes) > 1
    parts = ["learning rate" + (" (left)" if scale else "")] if _has(result, "lr") else []
    parts += ["fp16 loss scale (right, log2)"] if scale else []
    shaded = ": collapses shaded" if scale else ""
    lx.set_title(f"{' and '.join(parts)} by iteration{shaded}", fontsize=10)
    # Outside the panel, past the right axis's label: it never covers a line.
    offset = (1.08, 1.0) if len(axes) > 1 else (1.01, 1.0)
    axes[-1].legend(handles, labels, fontsize=8, framealpha=0.9, loc="upper left",
                    bbox_to_anchor=offset, borderaxespad=0.0)  # fmt: skip


def _set_loss_ylim(ax: Any, result: TriageResult) -> None:
    """Keep the warm-up's huge initial loss from flattening the part worth reading."""
    main = next(iter(result.curves.values()))
    if len(main.loss) < 20:
        return
    start = len(main.loss) // 20
    body = main.loss[start:]
    peaks = [s.peak_loss for s in main.spikes if not s.blip]
    lo, hi = float(np.min(body)), float(max([np.quantile(body, 0.995), *peaks]))
    pad = 0.05 * (hi - lo or 1.0)
    ax.set_ylim(lo - pad, hi + pad)


def event_counts(result: TriageResult) -> str:
    counts = result.summary["events"]
    return ", ".join(f"{v} {k}" for k, v in counts.items()) or "no events"
