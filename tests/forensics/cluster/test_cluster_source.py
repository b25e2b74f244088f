"""Source clusters and verdicts on generated windows with a known dirty crawl batch."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from scipy.stats import fisher_exact

from forensics.cluster import assign_verdicts, cluster_sources, culprit_docs, headline_culprit
from forensics.cluster.stats import baseline_flagged_p, enrichment_p, holm
from forensics.cluster.verdict import window_dirty_rule
from forensics.errors import ForensicsError
from forensics_testing.windows import generate_run, split_burst


def ranked_sources(run) -> pl.DataFrame:
    return assign_verdicts(cluster_sources(run.window, run.baseline))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dirty_new_batch_is_the_top_culprit_and_clean_batches_are_clean(seed):
    run = generate_run(3000, 3000, dirty_share=0.08, seed=seed)
    ranked = ranked_sources(run)
    top = headline_culprit(ranked)
    assert top is not None
    assert (top["facet"], top["key"]) == ("crawl_batch", run.dirty_batch)
    assert top["new_in_window"] is True
    assert ranked.row(0, named=True)["id"] == top["id"]
    batches = ranked.filter(pl.col("facet") == "crawl_batch")
    verdict = dict(zip(batches["key"], batches["verdict"], strict=True))
    assert all(verdict[b] == "clean" for b in run.clean_batches)
    # Exactly one culprit: the dataset, source and file that hold the same documents are merged
    # into it as aliases; the batch's domains are suspects explained by it.
    assert ranked.filter(pl.col("verdict") == "culprit").height == 1
    assert "dataset=web_v2" in top["aliases"]
    explained = ranked.filter(pl.col("explained_by") == top["id"])
    assert explained.height > 0 and "suspect" in set(explained["verdict"])
    assert "culprit" not in set(explained["verdict"])


def test_nested_culprits_name_the_batch_not_its_dataset_nor_its_domains():
    """A big window: the batch's spam domains and its (mixed) dataset are culprits on their own
    numbers too; the report must name the batch, with the others explained by it."""
    run = generate_run(20_000, 20_000, dirty_share=0.1, dirty_dataset="web_v1", words=8, seed=9)
    ranked = ranked_sources(run)
    top = headline_culprit(ranked)
    assert (top["facet"], top["key"]) == ("crawl_batch", run.dirty_batch)
    assert ranked.filter(pl.col("verdict") == "culprit").height == 1
    dataset = ranked.filter(pl.col("aliases").list.contains("dataset=web_v1")).row(0, named=True)
    assert dataset["explained_by"] == top["id"] and dataset["verdict"] == "suspect"
    spam_domains = ranked.filter(pl.col("key").str.starts_with("spam"))
    assert spam_domains["p_value"].min() < 1e-3  # significant on their own ...
    assert set(spam_domains["explained_by"]) == {top["id"]}  # ... yet inside the batch
    assert "culprit" not in set(spam_domains["verdict"])


def test_over_represented_dirty_batch_already_in_baseline_is_culprit_not_new():
    run = generate_run(4000, 4000, dirty_share=0.12, dirty_in_baseline_share=0.02, seed=3)
    top = headline_culprit(ranked_sources(run))
    assert top is not None and top["key"] == run.dirty_batch
    assert top["new_in_window"] is False
    assert top["baseline_docs"] > 0 and top["enrichment"] > 3


def test_dirty_batch_at_its_usual_share_is_only_a_suspect():
    """Dirty but not what changed: the same share in baseline and window."""
    run = generate_run(4000, 4000, dirty_share=0.08, dirty_in_baseline_share=0.08, seed=4)
    ranked = ranked_sources(run)
    assert headline_culprit(ranked) is None
    row = ranked.filter(pl.col("key") == run.dirty_batch).row(0, named=True)
    assert row["verdict"] == "suspect" and row["dirty"] and not row["over_represented"]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("fp_rate", [0.01, 0.03])
def test_clean_window_has_no_culprit(seed, fp_rate):
    run = generate_run(3000, 3000, dirty_share=0.0, false_positive_rate=fp_rate, seed=seed)
    ranked = ranked_sources(run)
    assert run.dirty_batch is None
    assert ranked.filter(pl.col("verdict") == "culprit").height == 0
    assert headline_culprit(ranked) is None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_burst_that_fills_the_window_is_named_against_the_baseline(seed):
    """85% of the window is one burst, dealt over 4 new datasets: the rest of each burst group is
    the other three, so no group is dirtier than the rest of the window; against the baseline
    (the data before, ~1% flagged) every burst group is, and the burst is named."""
    run, parts = split_burst(generate_run(1500, 1500, dirty_share=0.85, dirty_flag_rate=0.9,
                                          seed=seed), 4)  # fmt: skip
    ranked = ranked_sources(run)
    burst = ranked.filter(pl.col("key").is_in(parts))
    assert burst.height == 4 and burst["window_share"].sum() > 0.8
    assert not burst.select(window_dirty_rule())[:, 0].any()  # the window alone cannot tell
    assert burst["dirty"].all() and set(burst["verdict"]) == {"culprit"}
    top = headline_culprit(ranked)
    assert top is not None and top["kind"] == "source"
    # every culprit is burst: its members are dirty-batch documents, and they hold the burst
    is_burst = run.window["crawl_batch"].is_in(parts).to_numpy()
    blamed = culprit_docs(ranked, run.window)
    rows = run.window.with_row_index("r").join(blamed, on=["dataset", "doc_id"])["r"].to_numpy()
    assert is_burst[rows].all() and rows.size == is_burst.sum()
    # the clean batches, as common in the baseline as in the window, stay clean
    clean = ranked.filter(pl.col("key").is_in(run.clean_batches))
    assert clean.height == len(run.clean_batches) and set(clean["verdict"]) == {"clean"}
    assert not clean["dirty"].any()
    assert (top["baseline_flagged_rate"] < 0.05) and top["baseline_flag_p_value"] < 1e-3


def test_a_burst_as_common_in_the_baseline_is_not_blamed():
    """The same 85% dirty share before the spike as in it: the baseline is as dirty as the
    window: nothing changed, so no culprit, and the burst groups are dirty against neither."""
    run, parts = split_burst(generate_run(1500, 1500, dirty_share=0.85, dirty_flag_rate=0.9,
                                          dirty_in_baseline_share=0.85, seed=7), 4)  # fmt: skip
    ranked = ranked_sources(run)
    assert headline_culprit(ranked) is None
    burst = ranked.filter(pl.col("key").is_in(parts))
    assert burst.height == 4 and burst["baseline_docs"].min() > 0
    assert burst["baseline_flagged_rate"].min() > 0.5 and not burst["dirty"].any()


def test_shares_counts_and_rates_match_a_direct_count():
    run = generate_run(1500, 1000, dirty_share=0.1, seed=5)
    clusters = cluster_sources(run.window, run.baseline, facets=["crawl_batch"])
    row = clusters.filter(pl.col("key") == run.dirty_batch).row(0, named=True)
    mine = run.window.filter(pl.col("crawl_batch") == run.dirty_batch)
    flagged = mine.filter((pl.col("garbage_score") >= 0.5) | (pl.col("spam_score") >= 0.5))
    assert row["docs"] == mine.height
    assert row["window_share"] == pytest.approx(mine.height / 1500)
    assert row["baseline_docs"] == 0 and row["baseline_share"] == 0
    assert row["flagged_rate"] == pytest.approx(flagged.height / mine.height)
    assert row["garbage_rate"] == pytest.approx((mine["garbage_score"] >= 0.5).mean())
    assert sorted(row["members"]) == sorted(
        run.window.with_row_index("r").filter(pl.col("crawl_batch") == run.dirty_batch)["r"]
    )
    assert any("mojibake" in r for r in row["top_reasons"])
    assert clusters["window_share"].sum() == pytest.approx(1.0)


def test_exact_test_matches_scipy_fisher_and_holm_is_monotone():
    tables = [(30, 3000, 2, 3000), (5, 100, 5, 100), (0, 50, 3, 60), (12, 400, 0, 900)]
    a = np.array([t[0] for t in tables])
    c = np.array([t[2] for t in tables])
    for (ai, nw, ci, nb), p in zip(
        tables, [enrichment_p(ai, ci, nw, nb) for ai, nw, ci, nb in tables], strict=True
    ):
        expected = fisher_exact([[ai, nw - ai], [ci, nb - ci]], alternative="greater").pvalue
        assert p == pytest.approx(expected, rel=1e-6)
    assert a.size == c.size
    raw = np.array([0.01, 0.04, 0.03, 0.005])
    adj = holm(raw)
    np.testing.assert_allclose(adj, [0.03, 0.06, 0.06, 0.02])
    assert np.all(adj >= raw)


def test_baseline_flag_test_matches_scipy_fisher():
    rng = np.random.default_rng(1)
    for _ in range(40):
        docs = int(rng.integers(1, 200))
        flagged = int(rng.integers(0, docs + 1))
        nb = int(rng.integers(1, 500))
        fb = int(rng.integers(0, nb + 1))
        ours = baseline_flagged_p(np.array([flagged]), np.array([docs]), nb, fb)[0]
        table = [[flagged, docs - flagged], [fb, nb - fb]]
        assert ours == pytest.approx(fisher_exact(table, alternative="greater")[1], rel=1e-9)


def test_culprit_docs_lists_the_culprit_batch_documents():
    run = generate_run(2000, 2000, dirty_share=0.1, seed=6)
    ranked = ranked_sources(run)
    blocked = culprit_docs(ranked, run.window)
    expected = run.window.filter(pl.col("crawl_batch") == run.dirty_batch)
    assert blocked.height == expected.height
    assert set(blocked["doc_id"]) == set(expected["doc_id"])
    assert blocked.columns == ["dataset", "doc_id", "cluster"]


def test_bad_input_is_a_one_line_forensics_error():
    run = generate_run(200, 200, seed=7)
    with pytest.raises(ForensicsError, match="missing column.*garbage_score"):
        cluster_sources(run.window.drop("garbage_score"), run.baseline)
    with pytest.raises(ForensicsError, match="no facet column 'shard'"):
        cluster_sources(run.window, run.baseline, facets=["shard"])
    with pytest.raises(ForensicsError, match="empty"):
        cluster_sources(run.window.clear(), run.baseline)
    with pytest.raises(ForensicsError, match="baseline documents: the table is empty"):
        cluster_sources(run.window, run.baseline.clear())


def test_null_facet_values_and_missing_reasons_are_tolerated():
    run = generate_run(300, 300, seed=8)
    window = run.window.with_columns(
        pl.when(pl.col("doc_id") % 7 == 0).then(None).otherwise(pl.col("domain")).alias("domain")
    ).drop("garbage_reason", "spam_reason")
    clusters = cluster_sources(window, run.baseline, facets=["domain"])
    assert "(none)" in clusters["key"].to_list()
    assert clusters["docs"].sum() == 300


def test_top_reasons_are_grouped_by_kind_not_exact_string():
    """Reasons that differ only in numbers or quoted samples are one reason with the summed
    count; different kinds (a 2-gram vs a 3-gram, mojibake vs control characters) stay apart."""
    from forensics.cluster.source import reason_kind, top_reasons

    spam = (
        ["top 2-gram covers 25% of word characters"] * 5
        + ["top 2-gram covers 26% of word characters; skeleton shared with 66 other documents"] * 5
        + ["top 2-gram covers 31% of word characters"] * 2
        + ["top 3-gram covers 40% of word characters"] * 3
        + [""] * 3
    )
    garbage = (
        ["mojibake (ftfy badness): 4 suspicious sequences like 'Ã©'"] * 4
        + ["mojibake (ftfy badness): 12 suspicious sequences like 'it's, ok'"] * 3
        + ["3 C1 control characters like '\\x85', <1% of text"] * 4
        + [""] * 7
    )
    window = pl.DataFrame({"k": ["a"] * 18, "spam_reason": spam, "garbage_reason": garbage})
    got = top_reasons(window, pl.col("k").alias("key"), limit=5).row(0, named=True)
    assert got["top_reasons"] == [
        "top 2-gram covers 25% of word characters (12)",
        "mojibake (ftfy badness): 4 suspicious sequences like 'Ã©' (7)",
        "skeleton shared with 66 other documents (5)",
        "3 C1 control characters like '\\x85', <1% of text (4)",
        "top 3-gram covers 40% of word characters (3)",
    ]
    assert reason_kind("UTF-16 text read as 8-bit: 40 interleaved NULs, 2% of text") == (
        "UTF-16 text read as 8-bit: N interleaved NULs, N% of text"
    )
    assert reason_kind("skeleton shared with 12 other documents") == reason_kind(
        "skeleton shared with 7 other documents"
    )


def test_top_reasons_group_by_the_scorers_rule_keys_when_given():
    """With `garbage_rule` / `spam_rule` (score_table(keys=True)) the kind is the rule key, not
    a regex over the prose: two doorway pages with different keywords are one reason, a quoted
    sample holding the separator stays whole, and a keyless note is grouped by its text."""
    from forensics.cluster.source import top_reasons

    spam = [
        "doorway page: 'shoes' forced into 90% of sentences, at varied positions",
        "doorway page: 'loans' forced into 85% of sentences, at varied positions; "
        "skeleton shared with 14 other documents (template with slot-filled variation)",
        "doorway page: 'shoes' forced into 90% of sentences, at varied positions",
        "",
    ]
    garbage = ["", "", "mojibake (ftfy badness): 3 suspicious sequences like 'a; b'", "note"]
    window = pl.DataFrame(
        {
            "k": ["a"] * 4,
            "spam_reason": spam,
            "spam_rule": ["doorway", "doorway;skeleton", "doorway", ""],
            "garbage_reason": garbage,
            "garbage_rule": ["", "", "ftfy", ""],
        }
    )
    got = top_reasons(window, pl.col("k").alias("key"), limit=5).row(0, named=True)
    assert got["top_reasons"] == [
        "doorway page: 'shoes' forced into 90% of sentences, at varied positions (3)",
        "mojibake (ftfy badness): 3 suspicious sequences like 'a; b' (1)",
        "note (1)",
        "skeleton shared with 14 other documents (template with slot-filled variation) (1)",
    ]


def test_member_arrays_are_each_groups_sorted_distinct_rows() -> None:
    """assign_verdicts reads every group's flagged members as `member_arrays` (one explode of
    the column): the rows `member_array` gives each group on its own, empty and missing lists
    included."""
    from forensics.cluster.verdict import member_array, member_arrays

    lists = pl.Series("flagged_members", [[5, 1, 5], [], None, [7], [3, 2, 9, 2]],
                      dtype=pl.List(pl.Int64))  # fmt: skip
    got = member_arrays(lists)
    assert [a.tolist() for a in got] == [[1, 5], [], [], [7], [2, 3, 9]]
    for row, array in zip(lists, got, strict=True):
        assert np.array_equal(array, member_array(row))


def test_overlap_of_two_groups_is_their_common_rows_either_way_round() -> None:
    from forensics.cluster.verdict import member_array, overlap

    rng = np.random.default_rng(11)
    for small, large in [(0, 50), (3, 5000), (400, 400), (2000, 30)]:
        x = member_array(pl.Series(rng.integers(0, 6000, size=small)))
        y = member_array(pl.Series(rng.integers(0, 6000, size=large)))
        common = len(set(x.tolist()) & set(y.tolist()))
        assert overlap(x, y) == overlap(y, x) == common


def test_overlap_matrix_is_overlap_of_every_pair() -> None:
    from forensics.cluster.verdict import member_array, overlap, overlap_matrix

    rng = np.random.default_rng(12)
    groups = [member_array(pl.Series(rng.integers(0, 3000, size=n))) for n in (0, 5, 900, 40, 2500)]
    matrix = overlap_matrix(groups)
    assert matrix.shape == (5, 5)
    for i, x in enumerate(groups):
        for j, y in enumerate(groups):
            assert matrix[i, j] == overlap(x, y)
    assert overlap_matrix([]).shape == (0, 0)
    assert not overlap_matrix([groups[0], groups[0]]).any()
