"""Verdicts that fit the baseline at hand (forensics.cluster.baseline_fit) and the report's
confidence and no-culprit lines (forensics.report.confidence), on generated windows."""

from __future__ import annotations

import numpy as np
import polars as pl

from forensics.cluster import assign_verdicts, cluster_sources
from forensics.cluster.baseline_fit import NEW_CLEAN, describe_fit, fitted_verdicts
from forensics.cluster.presence import PresenceMemo, window_presence
from forensics.report import build_report, summary_lines
from forensics.report.confidence import loss_explained
from forensics_testing.windows import generate_run

WINDOW = (80935, 81234)


def _fitted(run, baseline: tuple[int, int], starts: list[int]) -> tuple[pl.DataFrame, list]:
    clusters = cluster_sources(run.window, run.baseline)
    fit = describe_fit(WINDOW, baseline, starts, run.baseline.height, run.window.height)
    return fitted_verdicts(clusters, fit, run.window, run.replay, WINDOW), fit.notes


def test_a_degenerate_baseline_does_not_exonerate_a_dirty_group() -> None:
    # The HF streaming case: the baseline is a few iterations that already held the dirty batch.
    run = generate_run(1500, 60, dirty_share=0.05, dirty_in_baseline_share=0.05, seed=3)
    plain = assign_verdicts(cluster_sources(run.window, run.baseline))
    assert "culprit" not in plain.filter(pl.col("key") == "crawl-2026-10-17")["verdict"].to_list()
    ranked, notes = _fitted(run, (1, 2), [1])
    culprit = ranked.filter(pl.col("verdict") == "culprit")
    assert culprit.height and culprit.row(0, named=True)["key"] == "crawl-2026-10-17"
    assert any("too small to judge" in n for n in notes)


def test_new_clean_groups_at_a_switch_are_not_suspects() -> None:
    run = generate_run(1500, 1500, dirty_share=0.08, seed=5)
    ranked, notes = _fitted(run, (1, 300), [1, 81001])
    assert any("mixture switch" in n for n in notes)
    amber = ranked.filter((pl.col("verdict") == "suspect") & (pl.col("flagged_rate") == 0))
    assert amber.height == 0
    new_clean = ranked.filter(pl.col("new_in_window") & ~pl.col("dirty"))
    assert set(new_clean["label"].to_list()) <= {NEW_CLEAN}
    top = ranked.filter(pl.col("verdict") == "culprit").row(0, named=True)
    assert top["key"] == "crawl-2026-10-17"


def test_no_culprit_is_numerical_only_without_dirty_data() -> None:
    clean = generate_run(1500, 1500, dirty_share=0.0, seed=22)
    ranked, _ = _fitted(clean, (77935, 78234), [1])
    report = build_report(81234, WINDOW, (77935, 78234), None, ranked, clean.window, clean.baseline)
    assert "the data looks like the baseline" in dict(summary_lines(report))["NO CULPRIT"]
    # A dirty batch as common in the (ample) baseline as in the window: dirty, not blamed.
    dirty = generate_run(1500, 1500, dirty_share=0.05, dirty_in_baseline_share=0.05, seed=4)
    ranked, _ = _fitted(dirty, (77935, 78234), [1])
    assert not ranked.filter(pl.col("verdict") == "culprit").height
    report = build_report(81234, WINDOW, (77935, 78234), None, ranked, dirty.window, dirty.baseline)
    line = dict(summary_lines(report))["NO CULPRIT"]
    assert "numerical" not in line.split("Not cleared")[0] and "crawl-2026-10-17" in line


def test_how_sure_line_and_loss_attribution() -> None:
    its = np.arange(81000, 81235)
    share = pl.DataFrame({"iteration": its, "share": np.where(its >= 81100, 0.2, 0.0)})
    rng = np.random.default_rng(0)
    loss = 3.0 + rng.normal(0, 0.02, its.size) + np.where(its >= 81200, 1.5, 0.0)
    fit = loss_explained(pl.DataFrame({"step": its, "loss": loss}), share, (81000, 81234))
    assert fit is not None and fit["onset"] == 81100 and fit["after_onset"] > 0.99
    assert loss_explained(None, share, (81000, 81234)) is None
    run = generate_run(1500, 1500, dirty_share=0.08, seed=5)
    ranked, _ = _fitted(run, (1, 300), [1, 81001])
    report = build_report(81234, WINDOW, (1, 300), 81000, ranked, run.window, run.baseline,
                          replay=run.replay)  # fmt: skip
    labels = [label for label, _ in summary_lines(report)]
    sure = dict(summary_lines(report))["HOW SURE"]
    assert labels.index("HOW SURE") > labels.index("CULPRIT") and sure.startswith("data: strong")


def test_presence_reused_across_calls_equals_computed_afresh() -> None:
    """PresenceMemo (the evidence passes' rounds): a second call over the same rows reuses the
    clusters whose members are unchanged, computes the others, and gives what one call gives."""
    run = generate_run(1500, 1500, dirty_share=0.08, seed=5)
    clusters = cluster_sources(run.window, run.baseline)
    whole = window_presence(clusters, run.window, run.replay, WINDOW)
    memo = PresenceMemo()
    first = window_presence(
        clusters.head(clusters.height // 2), run.window, run.replay, WINDOW, memo
    )
    assert first.equals(whole.head(clusters.height // 2))
    again = window_presence(clusters, run.window, run.replay, WINDOW, memo)
    assert again.equals(whole)
    assert memo.known is not None and memo.known.height == clusters.height
    other_rows = run.replay.filter(pl.col("iteration") != WINDOW[1])  # new inputs: recomputed
    assert window_presence(clusters, run.window, other_rows, WINDOW, memo).equals(
        window_presence(clusters, run.window, other_rows, WINDOW)
    )


def test_presence_in_slices_of_clusters_equals_one_slice(monkeypatch) -> None:
    """The presence figures are computed a slice of clusters at a time (memory at production
    scale); each cluster's figures, to the last bit, are those of one pass over every cluster."""
    import forensics.cluster.presence as presence

    run = generate_run(1500, 1500, dirty_share=0.08, seed=5)
    clusters = cluster_sources(run.window, run.baseline)
    whole = window_presence(clusters, run.window, run.replay, WINDOW)
    monkeypatch.setattr(presence, "SLICE_MEMBERS", 50)
    assert len(presence._cluster_slices(clusters)) > 10
    assert window_presence(clusters, run.window, run.replay, WINDOW).equals(whole)
