"""The spike report's figures, read back as matplotlib objects: every line and span is named, the
culprit share goes on past the spike, embedding labels never overlap, and the incident timeline
tells the whole story, in a colour-blind-safe palette with no label over the data. The real
run's figures: tests/forensics/spike/test_spike_e2e.py."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import polars as pl
import pytest
from matplotlib.text import Text
from test_report import make_report

from forensics.report.contents import SpikeReport
from forensics.report.incident import Incident, remaining_share, share_past_spike

STEP = 81234  # make_report's spike: window 80935-81234, rollback 81150, skip 81001-81234
EVENTS = [
    {"kind": "grad_norm_alarm", "step": 81230, "end_step": 81240},
    {"kind": "loss_scale_collapse", "step": 81232, "end_step": 81236},
    {"kind": "spike", "step": STEP, "verdict": "malignant"},
]
CHECKPOINTS = list(range(80000, 82001, 50))


def ahead_table(first: int, last: int, share: float = 0.1) -> pl.DataFrame:
    it = np.arange(first, last + 1)
    return pl.DataFrame({"iteration": it, "samples": np.full(it.size, 512),
                         "share": np.full(it.size, share)})  # fmt: skip


@pytest.fixture(scope="module")
def report() -> SpikeReport:
    _, base = make_report()
    incident = Incident(
        events=EVENTS,
        stage_starts=[1, 81001],
        checkpoints=CHECKPOINTS,
        culprit_ahead=ahead_table(STEP + 1, 82000),
        last_iteration=82000,
    )
    return replace(base, incident=incident)


def legend_texts(fig) -> list[str]:
    legends = fig.legends or [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    return [t.get_text() for legend in legends for t in legend.get_texts()]


def share_fill(ax, prefix: str):
    """x range of the fill labelled `prefix...` (the culprit share, window or past the spike)."""
    (fill,) = [p for p in ax.patches if p.get_label().startswith(prefix)]
    xs = fill.get_path().vertices[:, 0]
    return float(xs.min()), float(xs.max())


def test_timeline_names_every_mark_in_one_legend(report: SpikeReport) -> None:
    from forensics.report.timeline import timeline_figure, timeline_span

    fig = timeline_figure(report)
    labels = legend_texts(fig)
    lo, hi = timeline_span(report)
    assert (lo, hi) == (80935, STEP + 300)  # one window's length past the spike
    in_view = [c for c in CHECKPOINTS if lo <= c <= hi]
    assert set(labels) == {
        "loss (training log)",
        "data stage starts: 81001",
        "grad-norm alarm (triage): 81230-81240",
        "loss-scale collapse (triage): 81232-81236",
        f"checkpoints on disk ({len(in_view)} in view)",
        "skipped iterations 81001-81234 (234)",
        "rollback: checkpoint 81150",
        f"spike: iteration {STEP} (triage: malignant)",
        "loss at the spike: 2.40",
        "culprit share of the iteration's samples (window)",
        "culprit share past the spike (block list; 10.0% of the rest of the run)",
    }
    ax = fig.axes[0]
    (marks,) = [line for line in ax.lines if line.get_label().startswith("checkpoints")]
    assert list(marks.get_xdata()) == in_view
    # The culprit share goes on past the spike, to the timeline's end.
    share_ax = fig.axes[1]
    assert share_fill(share_ax, "culprit share of the") == (80935 - 0.5, STEP + 0.5)
    first, last = share_fill(share_ax, "culprit share past the spike")
    assert (first, last) == (STEP + 0.5, hi + 0.5)
    # The lines are also named over the plot, and those names do not overlap.
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    tags = {t.get_text(): Text.get_window_extent(t, renderer) for t in ax.texts}
    assert {"stage 81001", "rollback 81150", f"spike {STEP}"} <= set(tags)
    for a, b in itertools.combinations(tags.values(), 2):
        assert not a.overlaps(b)


def test_timeline_without_a_log_or_a_culprit(report: SpikeReport) -> None:
    """No log: the share and the restart marks still make a timeline; nothing at all: none."""
    from forensics.report.timeline import timeline_figure

    bare = replace(report, loss=None, incident=Incident(stage_starts=[1]))
    labels = legend_texts(timeline_figure(bare))
    assert "loss (training log)" not in labels and not any("alarm" in x for x in labels)
    assert "rollback: checkpoint 81150" in labels
    assert timeline_figure(replace(bare, culprit_share=None)) is None


def test_share_plot_goes_on_past_the_spike_and_names_its_lines(report: SpikeReport) -> None:
    from forensics.report.plots import culprit_share_figure

    fig = culprit_share_figure(report)
    labels = legend_texts(fig)
    for want in ("spike: iteration 81234", "rollback: checkpoint 81150",
                 "culprit's first document: iteration 81001",
                 "skipped iterations 81001-81234 (234)", "loss (training log)"):  # fmt: skip
        assert want in labels
    ax = fig.axes[0]
    assert share_fill(ax, "culprit share past the spike") == (STEP + 0.5, STEP + 30 + 0.5)
    assert ax.get_xlim()[1] == STEP + 30 + 0.5
    # Without the exposure ahead (an older pipeline) the share stops at the spike.
    alone = culprit_share_figure(replace(report, incident=None))
    assert not [p for p in alone.axes[0].patches if "past" in p.get_label()]


def test_past_share_comes_from_the_exposure_after_the_spike() -> None:
    exposure = pl.DataFrame(
        {"iteration": [9, 10, 11, 12, 13], "samples": [8, 8, 8, 0, 4],
         "flagged_samples": [8, 8, 2, 0, 1]}
    )  # fmt: skip
    ahead = share_past_spike(exposure, 10)
    assert ahead.to_dicts() == [
        {"iteration": 11, "samples": 8, "share": 0.25},
        {"iteration": 13, "samples": 4, "share": 0.25},
    ]
    assert remaining_share(ahead) == 0.25
    assert remaining_share(ahead.head(0)) == 0.0


def crowded_report(clusters: int = 12) -> SpikeReport:
    """Embedding clusters whose centres nearly coincide (labels at the centres would all
    overlap), each with keywords, one a culprit and one a suspect; a `$` in a keyword."""
    rng = np.random.default_rng(3)
    rows, points = [], []
    for k in range(clusters):
        verdict = {0: "culprit", 1: "suspect"}.get(k, "clean")
        rows.append({"id": f"e{k}", "kind": "embedding", "facet": "embedding", "key": f"e{k}",
                     "verdict": verdict, "keywords": [f"word{k}", "us$d", "coupons"]})  # fmt: skip
        for x, y in rng.normal(0.0, 0.01, size=(5 + k, 2)):
            points.append({"x": x, "y": y, "cluster": f"e{k}", "side": "window",
                           "flagged": False, "culprit": "e0" if k == 0 else None,
                           "dataset": "web", "doc_id": len(points)})  # fmt: skip
    return SpikeReport(step=100, window=(1, 100), baseline=(200, 300), rollback_iteration=None,
                       clusters=pl.DataFrame(rows), embedding_xy=pl.DataFrame(points))  # fmt: skip


def test_embedding_labels_carry_keywords_and_never_overlap() -> None:
    from forensics.report.plots import embedding_figure

    fig = embedding_figure(crowded_report())
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    boxes = {t.get_text(): Text.get_window_extent(t, renderer) for t in ax.texts}
    assert len(boxes) >= 4
    # culprit and suspect first, named by their keywords, `$` escaped for mathtext
    assert r"e0: word0, us\$d, coupons" in boxes and r"e1: word1, us\$d, coupons" in boxes
    for a, b in itertools.combinations(boxes.values(), 2):
        assert not a.overlaps(b)
    legend = ax.get_legend().get_window_extent(renderer)
    assert not any(box.overlaps(legend) for box in boxes.values())


def drawn_colours(fig) -> set[str]:
    """Every colour an artist of `fig`'s axes draws with (fully transparent ones left out)."""
    from matplotlib.colors import to_hex, to_rgba_array

    found: set[str] = set()

    def add(colours) -> None:
        for rgba in to_rgba_array(colours):
            if rgba[3] > 0:
                found.add(to_hex(rgba, keep_alpha=False))

    for ax in fig.axes:
        for line in ax.lines:
            add(line.get_color())
            add(line.get_markeredgecolor())
        for patch in ax.patches:
            add(patch.get_facecolor())
            add(patch.get_edgecolor())
        for coll in ax.collections:
            add(coll.get_facecolors())
            add(coll.get_edgecolors())
        for text in ax.texts:
            add(text.get_color())
    return found


def test_plots_draw_only_colour_blind_safe_colours(report: SpikeReport) -> None:
    """The Okabe-Ito palette, black and greys: nothing told apart by red against green."""
    from forensics.report.plot_base import GREYS, OKABE_ITO
    from forensics.report.plots import culprit_share_figure, embedding_figure
    from forensics.report.timeline import timeline_figure

    allowed = {c.lower() for c in (*OKABE_ITO.values(), *GREYS)}
    for fig in (timeline_figure(report), culprit_share_figure(report), embedding_figure(report)):
        used = drawn_colours(fig)
        assert used and used <= allowed, used - allowed


def test_no_label_lies_over_the_data(report: SpikeReport) -> None:
    """The timeline's and the share plot's texts name their lines above the axes, never over a
    curve, a span or another text; the spike's loss is named in the legend."""
    from forensics.report.plots import culprit_share_figure
    from forensics.report.timeline import timeline_figure

    for fig in (timeline_figure(report), culprit_share_figure(report)):
        fig.draw_without_rendering()
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            frame = ax.get_window_extent(renderer)
            for text in ax.texts:
                box = Text.get_window_extent(text, renderer)
                assert box.y0 >= frame.y1 - 1, text.get_text()  # over the top edge
        assert any(t.startswith("loss at the spike: ") for t in legend_texts(fig))
        title = fig.get_suptitle()
        assert "culprit share" in title.lower() and ("loss" in title.lower()) == (len(fig.axes) > 1)
