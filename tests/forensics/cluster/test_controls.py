"""The clean control: a window whose data looks like the baseline names nothing, skips nothing and
says so, with the figures and the next step; a group that changed unflagged is left open for the
model ("unexplained: the model could tell"), never blamed on the data side alone.

The windows are generated (forensics_testing.windows) with the scorer's false-positive rate on
clean text, so what could go wrong is exactly a false culprit from noise."""

from __future__ import annotations

import polars as pl
import pytest

from forensics.cluster import assign_verdicts, cluster_sources, culprit_docs, headline_culprit
from forensics.cluster.baseline_fit import BaselineFit, fitted_verdicts
from forensics.cluster.controls import looks_like_baseline, unexplained_groups
from forensics.cluster.expected import Blend
from forensics.report.contents import build_report
from forensics.report.control_view import next_causes
from forensics.report.first_screen import first_screen
from forensics_testing.windows import generate_run

WINDOW, BASELINE, STEP = (80935, 81234), (80001, 80300), 81234


def _screen(run, ranked):
    report = build_report(STEP, WINDOW, BASELINE, 80900, ranked, run.window, run.baseline)
    return report, first_screen(report)


@pytest.mark.parametrize("seed", range(5))
def test_a_clean_window_names_nothing_and_says_the_data_looks_like_the_baseline(seed):
    run = generate_run(2000, 2000, dirty_share=0.0, false_positive_rate=0.02, seed=seed)
    ranked = assign_verdicts(cluster_sources(run.window, run.baseline))
    assert headline_culprit(ranked) is None and looks_like_baseline(ranked)
    assert culprit_docs(ranked, run.window).height == 0  # nothing to block or skip
    report, screen = _screen(run, ranked)
    assert "no data culprit: the data looks like the baseline" in screen.headline
    assert "nothing to skip or remove" in screen.headline
    labels = dict(screen.reasons)
    figures = labels["NO CULPRIT"]
    window_rate = run.window.select(
        ((pl.col("garbage_score") >= 0.5) | (pl.col("spam_score") >= 0.5)).mean()
    ).item()
    assert f"{100 * window_rate:.1f}% of the window's 2,000 documents flagged" in figures
    assert "forensics triage" in labels["NEXT"]  # no log read: triage's causes in its order


def test_a_new_clean_batch_the_blend_expects_is_explained():
    """A new crawl batch at a mixture switch, clean, at the share the new blend gives it: its
    newness is the blend's doing, so the data looks like the baseline."""
    run = generate_run(2000, 2000, dirty_share=0.12, dirty_flag_rate=0.0, seed=3)
    window = run.window
    samples = run.replay.select("iteration", "sample_index", "dataset", "doc_id")
    shares = window.group_by("dataset").len().with_columns(pl.col("len") / window.height)
    per_key = (
        window.group_by("dataset", "crawl_batch")
        .len()
        .join(window.group_by("dataset").len().rename({"len": "_n"}), on="dataset")
        .select("dataset", pl.col("crawl_batch").alias("key"), (pl.col("len") / pl.col("_n")))
        .rename({"len": "share"})
    )
    facet_shares = {"crawl_batch": per_key}
    blend = Blend(
        dict(shares.iter_rows()), [(2, 81001)], "blend weights", facet_shares.get, samples.height
    )
    fit = BaselineFit([81001], run.baseline.height, window.height)
    ranked = fitted_verdicts(
        cluster_sources(window, run.baseline), fit, window, samples, WINDOW, blend
    )
    batch = ranked.filter(pl.col("key") == run.dirty_batch).row(0, named=True)
    assert batch["new_in_window"] and batch["expected_share"] is not None
    assert unexplained_groups(ranked).height == 0 and looks_like_baseline(ranked)
    _, screen = _screen(run, ranked)
    assert "the data looks like the baseline" in screen.headline


def test_a_new_batch_no_scorer_flags_is_unexplained_and_sent_to_the_model():
    """No blend to explain it: the new batch is listed for the model, with the command, and
    still nothing is named or blocked."""
    run = generate_run(2000, 2000, dirty_share=0.12, dirty_flag_rate=0.0, seed=3)
    ranked = assign_verdicts(cluster_sources(run.window, run.baseline))
    assert headline_culprit(ranked) is None and culprit_docs(ranked, run.window).height == 0
    left = unexplained_groups(ranked)
    assert left["key"].to_list()[:1] == [run.dirty_batch] and not looks_like_baseline(ranked)
    report = build_report(STEP, WINDOW, BASELINE, 80900, ranked, run.window, run.baseline)
    report.checkpoint_command = "forensics spike --step 81234 --checkpoint 'ck pts/iter_0080900'"
    screen = first_screen(report)
    assert f"crawl_batch={run.dirty_batch}" in screen.headline and "--checkpoint" in screen.headline
    text = "\n".join(t for _, t in screen.reasons)
    assert dict(screen.reasons)["OPEN"].startswith("unexplained: crawl_batch=")
    assert "the model could tell" in text and "'ck pts/iter_0080900'" in text


def test_next_step_is_triages_supported_cause_not_the_data():
    events = [
        {"kind": "grad_norm_alarm", "step": 81200},
        {
            "kind": "loss_spike",
            "step": 81230,
            "likely_causes": [
                {"cause": "the data (a bad batch, or new data in the blend)", "supported": True,
                 "evidence": "a data stage began"},
                {"cause": "learning rate too high or no warmup", "supported": True,
                 "evidence": "lr rose 10x at 81190"},
                {"cause": "a faulty device", "supported": None, "evidence": "per-rank logs"},
            ],
        },
    ]  # fmt: skip
    run = generate_run(1500, 1500, dirty_share=0.0, seed=1)
    ranked = assign_verdicts(cluster_sources(run.window, run.baseline))
    report = build_report(STEP, WINDOW, BASELINE, 80900, ranked, run.window, run.baseline)
    report.next_causes = next_causes(events, STEP)
    assert [c["cause"] for c in report.next_causes][0].startswith("learning rate")
    labels = dict(first_screen(report).reasons)
    assert labels["NEXT"].startswith("triage supports learning rate too high or no warmup")
    assert "lr rose 10x" in labels["NEXT"]


def test_flagged_rates_of_sampled_sides_are_estimated_per_dataset() -> None:
    """With a sample design the control's flagged share is estimated as the source clusters
    estimate it: exact for a dataset scored whole, else its own sample's flagged share times
    its documents (unscored documents' null scores count as unflagged)."""
    from forensics.cluster.controls import flagged_rates
    from forensics.cluster.sample import SampleDesign

    # "a": 4 documents, all scored, 1 flagged. "b": 10 documents, own sample = the 2 smallest
    # `_u` (both scored, one flagged): 10 * 1/2 = 5 flagged; one more scored and flagged
    # outside the sample does not count.
    side = pl.DataFrame({
        "dataset": ["a"] * 4 + ["b"] * 10,
        "doc_id": list(range(4)) + list(range(10)),
        "_u": [0.1, 0.2, 0.3, 0.4] + [0.05, 0.9, 0.01, 0.5, 0.6, 0.7, 0.8, 0.85, 0.95, 0.99],
        "_scored": [True] * 4 + [True, True, True] + [False] * 7,
        "garbage_score": [0.9, 0.1, 0.0, 0.0] + [0.8, 0.9, 0.2] + [None] * 7,
        "spam_score": [0.0] * 4 + [0.0, 0.0, None] + [None] * 7,
    })  # fmt: skip
    rates = flagged_rates(side, side.head(4), SampleDesign(sample_docs=2))
    assert rates["window_flagged_rate"] == pytest.approx((1 + 5) / 14)
    assert rates["baseline_flagged_rate"] == pytest.approx(1 / 4)
