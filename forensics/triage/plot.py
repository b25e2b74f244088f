"""triage.png: the loss with its EMA, power-law fit and events; the grad norm with triage's
alarms shaded; the lr and the fp16 loss scale with its collapses shaded. Every curve, line and
span is named in its panel's legend.

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
_VERDICT_COLOR = {"benign": "tab:green", "malignant": "tab:red", "undecided": "tab:orange"}
_SPARSE = 2000  # "best" legend placement costs seconds on denser plots


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
    t = result.table
    return col in t.columns and t[col].drop_nulls().len() > 0


def triage_figure(result: TriageResult) -> Any:
    """Loss with EMA, power law and events; grad norm with alarms; lr and loss scale."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    has_grad = _has(result, "grad_norm")
    has_lr = _has(result, "lr") or _has(result, "loss_scale")
    panels = 1 + has_grad + has_lr
    fig = Figure(figsize=(11, 3.2 + 2.2 * (panels - 1)), layout="tight")
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
    return fig


def render_png(result: TriageResult) -> bytes:
    """triage.png's bytes (see triage_figure)."""
    buf = io.BytesIO()
    triage_figure(result).savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def _legend_loc(result: TriageResult) -> str:
    return "best" if len(result.table) <= _SPARSE else "upper right"


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
            color="tab:blue" if main else None,
            label=plot_label(name),
        )
        if main:
            _mark_main_curve(ax, c)
    _set_loss_ylim(ax, result)
    ax.set_ylabel("loss")
    # "best" placement costs seconds on dense plots; sparse plots are where it matters.
    sparse = sum(len(c.steps) for c in result.curves.values()) <= _SPARSE
    ax.legend(loc="best" if sparse else "upper right", fontsize=8, framealpha=0.7)
    title = plot_label(f"triage: {result.summary['status']}  ({event_counts(result)})", 200)
    ax.set_title(title, fontsize=10)


def _mark_main_curve(ax: Any, c: Any) -> None:
    """EMA, power-law fit, spikes, nan/missing steps, blips, divergence and plateaus."""
    _line(ax, c.steps, c.ema, lw=1.6, color="navy", label="EMA", marker=None)
    if c.fit is not None:
        fs = c.steps[c.steps >= c.fit.from_step]
        ax.plot(
            fs,
            c.fit.predict(fs),
            "--",
            lw=1,
            color="gray",
            label=f"power law (exp {c.fit.exponent:.3f})",
        )
    named: set[str] = set()  # each verdict's marker and line named once in the legend
    for s in c.spikes:
        if s.blip:
            continue
        color = _VERDICT_COLOR[s.verdict]
        first = s.verdict not in named
        named.add(s.verdict)
        ax.scatter([s.peak_step], [s.peak_loss], marker="v", s=50, color=color, zorder=5,
                   label=f"{s.verdict} spike: peak" if first else None)  # fmt: skip
        if s.verdict != "benign":  # benign ones need no line across the plot
            ax.axvline(s.onset_step, color=color, lw=0.8, alpha=0.6,
                       label=f"{s.verdict} spike: onset" if first else None)  # fmt: skip
    if len(c.bad_steps):
        ax.scatter(
            c.bad_steps[:2000],
            np.full(min(len(c.bad_steps), 2000), 1.0),
            transform=ax.get_xaxis_transform(),
            marker="x",
            color="tab:red",
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
            color="tab:gray",
            zorder=4,
            label=f"{len(blips)} one-step blips",
        )
    if c.divergence is not None:
        ax.axvspan(
            c.divergence.step,
            c.divergence.end_step,
            color="tab:red",
            alpha=0.12,
            label="divergence",
        )
    for k, p in enumerate(c.plateaus):
        ax.axvspan(p.step, p.end_step, color="tab:gray", alpha=0.15,
                   label="plateau" if k == 0 else None)  # fmt: skip


def _plot_grad_norm(gx: Any, result: TriageResult) -> None:
    """The grad-norm panel (log scale) with the EMA alarms shaded."""
    t = result.table.select("step", "grad_norm").drop_nulls()
    t = t.filter(t["grad_norm"] > 0)
    _line(gx, t["step"].to_numpy(), t["grad_norm"].to_numpy(), lw=0.7, color="tab:purple",
          label="grad norm")  # fmt: skip
    if t.height:
        gx.set_yscale("log")
    alarms = [a for a in result.alarms if a.kind == "grad_norm_alarm"]
    for k, a in enumerate(alarms):
        gx.axvspan(a.step, max(a.end_step, a.step + 1), color="tab:red", alpha=0.25,
                   label="grad-norm alarm (EMA over its baseline)" if k == 0 else None)  # fmt: skip
    gx.set_ylabel("grad norm")
    gx.legend(loc=_legend_loc(result), fontsize=8, framealpha=0.7)


def _plot_lr_and_loss_scale(lx: Any, result: TriageResult) -> None:
    """The lr panel, with the fp16 loss scale on a second axis and its collapses shaded; one
    legend for both axes."""
    axes = [lx]
    if _has(result, "lr"):
        t = result.table.select("step", "lr").drop_nulls()
        _line(lx, t["step"].to_numpy(), t["lr"].to_numpy(), color="tab:green", lw=1, label="lr")
        lx.set_ylabel("lr")
    if _has(result, "loss_scale"):
        sx = lx.twinx()
        axes.append(sx)
        t = result.table.select("step", "loss_scale").drop_nulls()
        t = t.filter(t["loss_scale"] > 0)
        _line(sx, t["step"].to_numpy(), t["loss_scale"].to_numpy(), color="tab:brown", lw=1,
              drawstyle="steps-post", label="loss scale (right axis)")  # fmt: skip
        if t.height:
            sx.set_yscale("log", base=2)
        sx.set_ylabel("loss scale")
        collapses = [a for a in result.alarms if a.kind == "loss_scale_collapse"]
        for k, a in enumerate(collapses):
            lx.axvspan(a.step, max(a.end_step, a.step + 1), color="tab:brown", alpha=0.25,
                       label="loss-scale collapse" if k == 0 else None)  # fmt: skip
    handles, labels = [], []
    for ax in axes:
        h, lab = ax.get_legend_handles_labels()
        handles, labels = handles + h, labels + lab
    axes[-1].legend(handles, labels, loc=_legend_loc(result), fontsize=8, framealpha=0.7)


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
