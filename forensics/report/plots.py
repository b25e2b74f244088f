"""The report's plots as PNG bytes (embedded base64 in report.html, written beside report.md).

matplotlib's object API (Figure + Agg canvas), not pyplot: no global state, no display needed.
Labels that come from data (cluster ids and keywords) have `$` escaped so mathtext never parses
data as a formula. Each plot has a `*_figure` function returning the Figure (tests read its
legend and text) and a `plot_*` one returning PNG bytes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from forensics.pipeline import cache_key, cached_bytes, content_digest, module_version
from forensics.pipeline.cache import keep_latest
from forensics.report.contents import SpikeReport, cluster_name
from forensics.report.plot_base import (
    OKABE_ITO,
    SHARE_COLOUR,
    draw_share,
    label,
    legend_below,
    mark_restart,
    mark_spike_loss,
    new_figure,
    place_labels,
    png,
    restart_tags,
    steps_past,
    tag_lines,
)
from forensics.report.timeline import plot_timeline

# one per culprit cluster (Okabe-Ito: plot_base.OKABE_ITO)
CULPRIT_COLOURS = (OKABE_ITO["vermillion"], OKABE_ITO["orange"], OKABE_ITO["reddish_purple"],
                   OKABE_ITO["bluish_green"])  # fmt: skip
MORE_COLOUR = OKABE_ITO["yellow"]  # culprit clusters past the fourth
WINDOW_COLOUR = OKABE_ITO["blue"]
BASELINE_COLOUR = "#bbbbbb"
AFTER_SPIKE_FRACTION = 0.1  # the share plot runs this share of the window past the spike
MIN_STEPS_PAST_SPIKE = 5
LARGEST_LABELLED = 4  # embedding clusters labelled besides culprits, suspects and corroborators


def loss_span(report: SpikeReport, first: int) -> tuple[int, int]:
    """The iterations the loss overlay covers: from the plot's first iteration to a little past
    the spike (window/AFTER_SPIKE_FRACTION, at least a few steps), so the jump itself shows
    instead of ending under the spike line. Capped at the log's last step."""
    last = report.step
    if report.loss is not None and report.loss.height:
        past = steps_past(report, AFTER_SPIKE_FRACTION, MIN_STEPS_PAST_SPIKE)
        logged = int(report.loss["step"].max())
        last = max(report.step, min(report.step + past, logged))
    return first, last


def share_span(report: SpikeReport, first: int) -> tuple[int, int]:
    """The iterations the share plot covers: loss_span, widened to the same stretch past the
    spike when the culprit's share ahead is known (the culprit goes on after the spike)."""
    lo, hi = loss_span(report, first)
    ahead = report.incident.culprit_ahead if report.incident is not None else None
    if ahead is not None and ahead.height:
        past = steps_past(report, AFTER_SPIKE_FRACTION, MIN_STEPS_PAST_SPIKE)
        hi = max(hi, min(report.step + past, int(ahead["iteration"].max())))
    return lo, hi


def culprit_share_figure(report: SpikeReport):
    """Per-iteration share of samples holding culprit documents, over the loss when given.

    Solid over the replayed window, hatched past the spike (the exposure of the block list,
    when the pipeline measured it); the spike, the rollback checkpoint, the skipped iterations
    and the culprit's first document are marked and named in the legend under the plot.
    """
    share = report.culprit_share
    if share is None or share.height == 0:
        return None
    fig = new_figure(10.0, 4.4)
    ax = fig.add_subplot()
    lo, hi = share_span(report, int(share["iteration"].min()))
    hi = max(hi, int(share["iteration"].max()))
    top = draw_share(ax, report, hi)
    mark_restart(ax, report, view=(lo - 0.5, hi + 0.5))
    ax.set_xlabel("iteration")
    ax.set_ylabel("culprit samples (% of iteration)", color=SHARE_COLOUR)
    ax.set_ylim(0, max(5.0, top * 1.1))
    ax.set_xlim(lo - 0.5, hi + 0.5)
    axes = [ax]
    if report.loss is not None and report.loss.height:
        loss = report.loss.filter(pl.col("step").is_between(*loss_span(report, lo))).sort("step")
        if loss.height:
            ax2 = ax.twinx()
            ax2.plot(loss["step"].to_numpy(), loss["loss"].to_numpy(), color="#000000", lw=1,
                     label="loss (training log)")  # fmt: skip
            mark_spike_loss(ax2, report, loss)
            ax2.set_ylabel("loss")
            axes.append(ax2)
    tag_lines(ax, restart_tags(report))
    legend_below(fig, axes)
    over = ", with the training loss (right axis)" if len(axes) > 1 else ""
    fig.suptitle(f"Culprit share of each iteration's samples (left axis){over}")
    return fig


def plot_culprit_share(report: SpikeReport) -> bytes | None:
    """The culprit-share plot as PNG bytes (see culprit_share_figure)."""
    fig = culprit_share_figure(report)
    return None if fig is None else png(fig)


def plot_embedding(report: SpikeReport) -> bytes | None:
    """The embedding scatter as PNG bytes (see embedding_figure)."""
    fig = embedding_figure(report)
    return None if fig is None else png(fig)


def embedding_figure(report: SpikeReport):
    """The embedded sample on its first two principal components: the culprit's documents in
    red (one colour per culprit cluster, named in the legend), the rest of the window in blue,
    the baseline in grey, flagged documents ringed in black; the culprit, suspect and
    corroborating embedding clusters and the largest few labelled with their keywords, placed
    so no two labels overlap (see embedding_labels).

    Colours follow the document's culprit membership (source or embedding cluster), not the
    embedding cluster's verdict: an embedding cluster inside a culprit source is "explained"
    and clean, and colouring by it would paint the culprit's documents blue.
    """
    xy = report.embedding_xy
    if xy is None or xy.height == 0:
        return None
    if "culprit" not in xy.columns:
        xy = xy.with_columns(pl.lit(None, dtype=pl.Utf8).alias("culprit"))
    fig = new_figure(10.0, 5.4)
    ax = fig.add_subplot()
    _scatter_sides(ax, report, xy)
    ax.set_xlabel("PC 1")
    ax.set_ylabel("PC 2")
    legend = ax.legend(fontsize=8, loc="best", markerscale=1.5, framealpha=0.85)
    title = (
        "Sampled documents by embedding (PC 1, PC 2); labels: clusters' keywords; ringed: flagged"
    )
    ax.set_title(title, fontsize=10)
    fig.draw_without_rendering()  # the layout and the legend's place, then frozen: labels are
    fig.set_layout_engine("none")  # placed in those pixels
    renderer = fig.canvas.get_renderer()
    box = legend.get_window_extent(renderer)
    legend.set_loc(tuple(box.transformed(ax.transAxes.inverted()).p0))  # "best" would move it
    place_labels(ax, embedding_labels(report, xy), [box])
    return fig


def _scatter_sides(ax, report: SpikeReport, xy: pl.DataFrame) -> None:
    """Baseline, window, each culprit cluster's documents and the flagged ones, in the legend."""
    names = {r["id"]: cluster_name(r) for r in report.clusters.iter_rows(named=True)}
    sizes = report.clusters.select("id", "docs") if "docs" in report.clusters.columns else None
    docs = dict(sizes.iter_rows()) if sizes is not None else {}
    culprits = set(xy["culprit"].drop_nulls().to_list())  # once: not once per cluster
    order = [c for c in report.clusters["id"].to_list() if c in culprits]
    window = xy.filter(pl.col("side") == "window")
    base = xy.filter(pl.col("side") != "window")
    ax.scatter(base["x"], base["y"], s=6, c=BASELINE_COLOUR, alpha=0.6, lw=0,
               label=f"baseline ({base.height:,} embedded)")  # fmt: skip
    rest = window.filter(pl.col("culprit").is_null())
    ax.scatter(rest["x"], rest["y"], s=8, c=WINDOW_COLOUR, alpha=0.6, lw=0,
               label=f"window, not in a culprit ({rest.height:,} embedded)")  # fmt: skip
    shown = order[: len(CULPRIT_COLOURS)]
    for cid, colour in zip(shown, CULPRIT_COLOURS, strict=False):
        part = window.filter(pl.col("culprit") == cid)
        ax.scatter(part["x"], part["y"], s=14, c=colour, alpha=0.85, lw=0,
                   label=label(culprit_label(names.get(cid, cid), part.height, docs.get(cid)),
                               120))  # fmt: skip
    other = window.filter(pl.col("culprit").is_not_null() & ~pl.col("culprit").is_in(shown))
    if other.height:
        more = f"culprit: {len(order) - len(shown)} more clusters ({other.height:,} embedded)"
        ax.scatter(other["x"], other["y"], s=14, c=MORE_COLOUR, alpha=0.85, lw=0, label=more)
    flagged = xy.filter(pl.col("flagged"))
    if flagged.height:
        text = f"flagged: garbage or spam ({flagged.height:,} of the embedded)"
        ax.scatter(flagged["x"], flagged["y"], s=34, facecolors="none", edgecolors="black",
                   lw=0.6, alpha=0.8, label=text)  # fmt: skip


def culprit_label(name: str, embedded: int, docs: int | None) -> str:
    """ "culprit: crawl_batch=x (122 of its 125 window documents embedded)": the plot holds
    the embedded sample, so its count is said against the cluster's."""
    of = f" of its {docs:,} window documents" if docs is not None else ""
    return f"culprit: {name} ({embedded:,}{of} embedded)"


def embedding_labels(report: SpikeReport, xy: pl.DataFrame) -> list[tuple[str, float, float]]:
    """(text, x, y) for the embedding clusters worth a label, most important first: culprits,
    suspects, clusters mostly made of culprit documents, then the LARGEST_LABELLED biggest;
    each at its points' centre, named "e3: keyword, keyword" (the cluster's keywords)."""
    rows = {r["id"]: r for r in report.clusters.iter_rows(named=True)}
    stats = (
        xy.group_by("cluster")
        .agg(
            pl.col("x").mean(),
            pl.col("y").mean(),
            pl.len().alias("n"),
            pl.col("culprit").is_not_null().mean().alias("culprit_part"),
        )
        .filter(pl.col("cluster").is_in(list(rows)))
    )
    rank = {"culprit": 0, "suspect": 1}
    key = {c: (rank.get(rows[c].get("verdict"), 2 if part > 0.5 else 3), -n, c)
           for c, n, part in stats.select("cluster", "n", "culprit_part").iter_rows()}  # fmt: skip
    ordered = sorted(key, key=key.get)
    important = [c for c in ordered if key[c][0] < 3]
    largest = [c for c in ordered if key[c][0] == 3][:LARGEST_LABELLED]
    where = {c: (x, y) for c, x, y in stats.select("cluster", "x", "y").iter_rows()}
    out = []
    for cid in important + largest:
        words = rows[cid].get("keywords") or []
        text = f"{cid}: {', '.join(words)}" if words else str(cid)
        out.append((text, *where[cid]))
    return out


def plot_score_histograms(report: SpikeReport) -> bytes | None:
    """Garbage and spam score distributions, window vs baseline (density, log scale)."""
    scores = report.scores
    if scores is None or scores.height == 0:
        return None

    bins = np.linspace(0, 1, 41)
    fig = new_figure(10.0, 3.2)
    axes = fig.subplots(1, 2)
    for ax, col in zip(axes, ("garbage_score", "spam_score"), strict=True):
        for side, colour in (("baseline", "#777777"), ("window", SHARE_COLOUR)):
            values = scores.filter(pl.col("side") == side)[col].to_numpy()
            if values.size == 0:
                continue
            weights = np.full(values.size, 1.0 / values.size)
            ax.hist(values, bins=bins, weights=weights, histtype="step", lw=1.5,
                    color=colour, label=f"{side} ({values.size:,} docs)")  # fmt: skip
        ax.axvline(0.5, color="#000000", ls=":", lw=1)
        ax.set_yscale("log")
        ax.set_xlabel(col.replace("_", " ") + " (>= 0.5 flagged)")
        ax.set_ylabel("share of documents (log scale)")
        ax.legend(fontsize=7)
    fig.suptitle("Share of documents per garbage and spam score, window against baseline")
    return png(fig)


def _version(package: str) -> str:
    """An installed package's version, without importing it (a cached plot needs no
    matplotlib)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "none"


KEPT_RENDERS = 8  # per plot: a user going back and forth between thresholds reads them all

# The report fields each plot reads (`report.culprit` reads clusters): a plot is rendered
# again only when one of them changed (render_plots with a cache folder).
PLOT_INPUTS = {
    "timeline": ("step", "window", "rollback_iteration", "loss", "incident", "culprit_share",
                 "skip", "culprit_first_iteration", "clusters", "model"),
    "culprit_share": ("step", "window", "rollback_iteration", "loss", "incident",
                      "culprit_share", "skip", "culprit_first_iteration", "clusters", "model"),
    "embedding": ("clusters", "embedding_xy"),
    "scores": ("scores",),
}  # fmt: skip


def render_plots(report: SpikeReport, cache: Path | None = None) -> dict[str, bytes]:
    """name -> PNG bytes for every plot the report has data for.

    `cache`: a folder of earlier renders, each named by a hash of the fields the plot reads
    (PLOT_INPUTS) and of the report code; a rerun that changed none of them (another
    threshold that leaves the scores alone, `--culprit`) reads the PNG instead of drawing it."""
    out = {}
    code = module_version("forensics.report") if cache is not None else ""
    versions = [pl.__version__, _version("matplotlib")] if cache is not None else []
    for name, fn in (
        ("timeline", plot_timeline),
        ("culprit_share", plot_culprit_share),
        ("embedding", plot_embedding),
        ("scores", plot_score_histograms),
    ):
        if cache is None:
            png = fn(report)
        else:
            inputs = content_digest(*(getattr(report, f) for f in PLOT_INPUTS[name]))
            key = cache_key(plot=name, inputs=inputs, code=code, versions=versions)
            png = cached_bytes(cache / f"{name}-{key}.png", lambda fn=fn: fn(report))
            keep_latest(cache, f"{name}-*.png", KEPT_RENDERS)
        if png is not None:
            out[name] = png
    return out
