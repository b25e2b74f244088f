"""The report's plots as PNG bytes (embedded base64 in report.html, written beside report.md).

matplotlib's object API (Figure + Agg canvas), not pyplot: no global state, no display needed.
The only labels that come from data are cluster ids; `$` in them is escaped so mathtext never
parses data as a formula.
"""

from __future__ import annotations

import io

import numpy as np
import polars as pl

from forensics.report.model import SpikeReport

VERDICT_COLOURS = {"culprit": "#d62728", "suspect": "#ff7f0e", "clean": "#1f77b4"}
DPI = 100


def _figure(width: float = 10.0, height: float = 3.4):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    return fig


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def plot_culprit_share(report: SpikeReport) -> bytes | None:
    """Per-iteration share of samples holding culprit documents, over the loss when given."""
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
    ax.axvline(report.step, color="black", ls="--", lw=1)
    if report.loss is not None and report.loss.height:
        lo, hi = float(it.min()), float(max(it.max(), report.step))
        loss = report.loss.filter(pl.col("step").is_between(lo, hi)).sort("step")
        if loss.height:
            ax2 = ax.twinx()
            ax2.plot(loss["step"].to_numpy(), loss["loss"].to_numpy(), color="black", lw=1)
            ax2.set_ylabel("loss")
    ax.set_title("Share of each iteration's samples that hold culprit documents (dashed: spike)")
    return _png(fig)


def plot_embedding(report: SpikeReport) -> bytes | None:
    """The embedded sample on its first two principal components, coloured by verdict."""
    xy = report.embedding_xy
    if xy is None or xy.height == 0:
        return None

    verdicts = report.clusters.filter(pl.col("kind") == "embedding").select(
        pl.col("id").alias("cluster"), "verdict"
    )
    data = xy.join(verdicts, on="cluster", how="left").with_columns(
        pl.col("verdict").fill_null("clean")
    )
    fig = _figure(10.0, 5.0)
    ax = fig.add_subplot()
    base = data.filter(pl.col("side") == "baseline")
    ax.scatter(base["x"], base["y"], s=6, c="#bbbbbb", label="baseline", alpha=0.6, lw=0)
    for verdict, colour in VERDICT_COLOURS.items():
        part = data.filter((pl.col("side") == "window") & (pl.col("verdict") == verdict))
        if part.height == 0:
            continue
        flagged = part.filter(pl.col("flagged"))
        plain = part.filter(~pl.col("flagged"))
        ax.scatter(plain["x"], plain["y"], s=8, c=colour, alpha=0.7, lw=0,
                   label=f"window, {verdict} cluster")  # fmt: skip
        ax.scatter(flagged["x"], flagged["y"], s=18, c=colour, marker="x", lw=1,
                   label=f"window, {verdict}, flagged")  # fmt: skip
    centres = data.group_by("cluster").agg(pl.col("x").mean(), pl.col("y").mean())
    for name, x, y in centres.iter_rows():
        ax.annotate(str(name).replace("$", r"\$"), (x, y), fontsize=7, ha="center", alpha=0.8)
    ax.set_xlabel("PC 1")
    ax.set_ylabel("PC 2")
    ax.legend(fontsize=7, loc="best", markerscale=1.5)
    ax.set_title("Embedding clusters (sampled documents; x = flagged)")
    return _png(fig)


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
