"""The report's plots as PNG bytes (embedded base64 in report.html, written beside report.md).

matplotlib's object API (Figure + Agg canvas), not pyplot: no global state, no display needed.
The only labels that come from data are cluster ids; `$` in them is escaped so mathtext never
parses data as a formula.
"""

from __future__ import annotations

import io

import numpy as np
import polars as pl

from forensics.report.model import SpikeReport, cluster_name

CULPRIT_COLOURS = ("#d62728", "#ff7f0e", "#9467bd", "#8c564b")  # one per culprit cluster
MORE_COLOUR = "#e377c2"  # culprit clusters past the fourth
WINDOW_COLOUR = "#1f77b4"
BASELINE_COLOUR = "#bbbbbb"
DPI = 100
AFTER_SPIKE_FRACTION = 0.1  # the loss overlay runs this share of the window past the spike
MIN_STEPS_PAST_SPIKE = 5


def _figure(width: float = 10.0, height: float = 3.4):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    return fig


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def loss_span(report: SpikeReport, first: int) -> tuple[int, int]:
    """The iterations the loss overlay covers: from the plot's first iteration to a little past
    the spike (window/AFTER_SPIKE_FRACTION, at least a few steps), so the jump itself shows
    instead of ending under the spike line. Capped at the log's last step."""
    last = report.step
    if report.loss is not None and report.loss.height:
        length = report.window[1] - report.window[0] + 1
        past = max(MIN_STEPS_PAST_SPIKE, round(length * AFTER_SPIKE_FRACTION))
        logged = int(report.loss["step"].max())
        last = max(report.step, min(report.step + past, logged))
    return first, last


def plot_culprit_share(report: SpikeReport) -> bytes | None:
    """Per-iteration share of samples holding culprit documents, over the loss when given.

    The loss runs a little past the spike (see loss_span) and the spike's own loss is marked,
    so an engineer sees the jump and where the culprit's share rose before it.
    """
    share = report.culprit_share
    if share is None or share.height == 0:
        return None
    fig = _figure()
    ax = fig.add_subplot()
    it = share["iteration"].to_numpy()
    ax.fill_between(it, share["share"].to_numpy() * 100, step="mid", color="#d62728", alpha=0.35)
    ax.step(it, share["share"].to_numpy() * 100, where="mid", color="#d62728", lw=1)
    ax.set_xlabel("iteration")
    ax.set_ylabel("culprit samples (% of iteration)", color="#d62728")
    ax.set_ylim(0, max(5.0, float(share["share"].max()) * 110))
    if report.culprit_first_iteration is not None:
        ax.axvline(report.culprit_first_iteration, color="#d62728", ls=":", lw=1)
    ax.axvline(report.step, color="#555555", ls="--", lw=0.8, zorder=0)
    lo, hi = loss_span(report, int(it.min()))
    ax.set_xlim(lo - 0.5, max(hi, int(it.max())) + 0.5)
    if report.loss is not None and report.loss.height:
        loss = report.loss.filter(pl.col("step").is_between(lo, hi)).sort("step")
        if loss.height:
            ax2 = ax.twinx()
            steps, values = loss["step"].to_numpy(), loss["loss"].to_numpy()
            ax2.plot(steps, values, color="black", lw=1)
            at = loss.filter(pl.col("step") == report.step)
            if at.height:
                y = float(at["loss"][0])
                ax2.plot([report.step], [y], "o", ms=6, mfc="none", mec="#d62728", mew=1.5)
                ax2.annotate(
                    f"spike: loss {y:.2f}",
                    (report.step, y),
                    xytext=(-8, 0),
                    textcoords="offset points",
                    ha="right",
                    va="center",
                    fontsize=8,
                )
            ax2.set_ylabel("loss")
    what = "dashed: spike; black: loss" if ax.figure.axes[1:] else "dashed: spike"
    ax.set_title(f"Share of each iteration's samples that hold culprit documents ({what})")
    return _png(fig)


def plot_embedding(report: SpikeReport) -> bytes | None:
    """The embedding scatter as PNG bytes (see embedding_figure)."""
    fig = embedding_figure(report)
    return None if fig is None else _png(fig)


def embedding_figure(report: SpikeReport):
    """The embedded sample on its first two principal components: the culprit's documents in
    red (one colour per culprit cluster, named in the legend), the rest of the window in blue,
    the baseline in grey, flagged documents ringed in black.

    Colours follow the document's culprit membership (source or embedding cluster), not the
    embedding cluster's verdict: an embedding cluster inside a culprit source is "explained"
    and clean, and colouring by it would paint the culprit's documents blue.
    """
    xy = report.embedding_xy
    if xy is None or xy.height == 0:
        return None
    if "culprit" not in xy.columns:
        xy = xy.with_columns(pl.lit(None, dtype=pl.Utf8).alias("culprit"))
    names = {r["id"]: cluster_name(r) for r in report.clusters.iter_rows(named=True)}
    order = [c for c in report.clusters["id"].to_list() if c in set(xy["culprit"].drop_nulls())]
    fig = _figure(10.0, 5.4)
    ax = fig.add_subplot()
    window = xy.filter(pl.col("side") == "window")
    base = xy.filter(pl.col("side") != "window")
    ax.scatter(base["x"], base["y"], s=6, c=BASELINE_COLOUR, alpha=0.6, lw=0,
               label=_label(f"baseline ({base.height:,})"))  # fmt: skip
    rest = window.filter(pl.col("culprit").is_null())
    ax.scatter(rest["x"], rest["y"], s=8, c=WINDOW_COLOUR, alpha=0.6, lw=0,
               label=_label(f"window, not in a culprit ({rest.height:,})"))  # fmt: skip
    shown = order[: len(CULPRIT_COLOURS)]
    for cid, colour in zip(shown, CULPRIT_COLOURS, strict=False):
        part = window.filter(pl.col("culprit") == cid)
        ax.scatter(part["x"], part["y"], s=14, c=colour, alpha=0.85, lw=0,
                   label=_label(f"culprit: {names.get(cid, cid)} ({part.height:,})"))  # fmt: skip
    other = window.filter(pl.col("culprit").is_not_null() & ~pl.col("culprit").is_in(shown))
    if other.height:
        more = f"culprit: {len(order) - len(shown)} more clusters ({other.height:,})"
        ax.scatter(other["x"], other["y"], s=14, c=MORE_COLOUR, alpha=0.85, lw=0, label=more)
    flagged = xy.filter(pl.col("flagged"))
    if flagged.height:
        label = f"flagged: garbage or spam ({flagged.height:,})"
        ax.scatter(flagged["x"], flagged["y"], s=34, facecolors="none", edgecolors="black",
                   lw=0.6, alpha=0.8, label=label)  # fmt: skip
    centres = xy.group_by("cluster").agg(pl.col("x").mean(), pl.col("y").mean()).sort("cluster")
    for name, x, y in centres.iter_rows():
        ax.annotate(_label(str(name)), (x, y), fontsize=7, ha="center", alpha=0.6)
    ax.set_xlabel("PC 1")
    ax.set_ylabel("PC 2")
    ax.legend(fontsize=8, loc="best", markerscale=1.5, framealpha=0.85)
    ax.set_title("Sampled documents by embedding (labels: embedding clusters; ringed = flagged)")
    return fig


def _label(text: str) -> str:
    """Legend and annotation text from data, with `$` escaped so mathtext never parses it."""
    return text.replace("$", r"\$")


def plot_score_histograms(report: SpikeReport) -> bytes | None:
    """Garbage and spam score distributions, window vs baseline (density, log scale)."""
    scores = report.scores
    if scores is None or scores.height == 0:
        return None

    bins = np.linspace(0, 1, 41)
    fig = _figure(10.0, 3.2)
    axes = fig.subplots(1, 2)
    for ax, col in zip(axes, ("garbage_score", "spam_score"), strict=True):
        for side, colour in (("baseline", "#7f7f7f"), ("window", "#d62728")):
            values = scores.filter(pl.col("side") == side)[col].to_numpy()
            if values.size == 0:
                continue
            weights = np.full(values.size, 1.0 / values.size)
            ax.hist(values, bins=bins, weights=weights, histtype="step", lw=1.5,
                    color=colour, label=f"{side} ({values.size:,} docs)")  # fmt: skip
        ax.axvline(0.5, color="black", ls=":", lw=1)
        ax.set_yscale("log")
        ax.set_xlabel(col.replace("_", " ") + " (>= 0.5 flagged)")
        ax.set_ylabel("share of documents")
        ax.legend(fontsize=7)
    return _png(fig)


def render_plots(report: SpikeReport) -> dict[str, bytes]:
    """name -> PNG bytes for every plot the report has data for."""
    out = {}
    for name, fn in (
        ("culprit_share", plot_culprit_share),
        ("embedding", plot_embedding),
        ("scores", plot_score_histograms),
    ):
        png = fn(report)
        if png is not None:
            out[name] = png
    return out
