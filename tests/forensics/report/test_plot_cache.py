"""Plots kept by their inputs: a rerun that changed nothing a plot reads gets the same PNG
without drawing it; a change to one of its fields redraws that plot alone."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest
from test_report_plots import report  # noqa: F401 - the module's report fixture

from forensics.report import plots
from forensics.report.contents import SpikeReport
from forensics.report.timeline import plot_timeline

PROPERTIES = {"culprit": "clusters", "stage_starts": "incident"}  # SpikeReport's properties


class Reads:
    """A report that records which of its fields a plot reads."""

    def __init__(self, real: SpikeReport) -> None:
        object.__setattr__(self, "_real", real)
        object.__setattr__(self, "seen", set())

    def __getattr__(self, name: str):
        self.seen.add(PROPERTIES.get(name, name))
        return getattr(self._real, name)


def test_each_plot_reads_only_the_fields_its_key_hashes(report: SpikeReport) -> None:  # noqa: F811
    fields = {f.name for f in dataclasses.fields(SpikeReport)}
    drawers = {
        "timeline": plot_timeline,
        "culprit_share": plots.plot_culprit_share,
        "embedding": plots.plot_embedding,
        "scores": plots.plot_score_histograms,
    }
    assert set(drawers) == set(plots.PLOT_INPUTS)
    for name, draw in drawers.items():
        spy = Reads(report)
        assert draw(spy) is not None, name
        assert spy.seen <= fields, spy.seen - fields
        assert spy.seen <= set(plots.PLOT_INPUTS[name]), (name, spy.seen)


def test_a_rerun_reads_the_plots_it_drew(
    report: SpikeReport,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = plots.render_plots(report, tmp_path)
    assert first == plots.render_plots(report)  # the same bytes as drawing without a cache
    drawn: list[str] = []

    def counting(name, draw):
        def wrapped(rep):
            drawn.append(name)
            return draw(rep)

        return wrapped

    monkeypatch.setattr(plots, "plot_embedding", counting("embedding", plots.plot_embedding))
    monkeypatch.setattr(plots, "plot_score_histograms",
                        counting("scores", plots.plot_score_histograms))  # fmt: skip
    assert plots.render_plots(report, tmp_path) == first
    assert drawn == []
    # Another verdict in the cluster table: the embedding plot (it colours by culprit) is
    # drawn again; the score histograms read only the scores and are not.
    flipped = report.clusters.with_columns(
        pl.when(pl.col("verdict") == "clean")
        .then(pl.lit("suspect"))
        .otherwise(pl.col("verdict"))
        .alias("verdict")
    )
    again = plots.render_plots(replace(report, clusters=flipped), tmp_path)
    assert drawn == ["embedding"]
    assert again["scores"] == first["scores"]


def test_float_noise_in_the_last_bits_keeps_the_key() -> None:
    """Sums whose order varies between runs (a parallel group_by) differ in their last bits;
    a real change of value changes the key."""
    from forensics.pipeline import content_digest

    base = pl.DataFrame({"id": ["a", "b"], "share": [0.1 + 0.2, 0.7]})
    noisy = base.with_columns(pl.col("share") * (1 + 1e-15))
    moved = base.with_columns(pl.col("share") * 1.001)
    assert content_digest(base) == content_digest(noisy) != content_digest(moved)
    assert content_digest(0.1 + 0.2) == content_digest(0.3) != content_digest(0.31)
