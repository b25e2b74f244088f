"""The report's numbers in words that say what they mean: a share against the blend, a burst
that is not a data stage starting, the block list as what the window drew plus the rest."""

from __future__ import annotations

from forensics.report.skip_view import ReportSkip
from forensics.report.summary import block_list_text, cluster_counts, counts_text
from forensics.report.why_shares import density_line, share_line

ROW = {"sample_share": 0.074, "expected_share": 0.078, "blend_stages": "stages 1-2",
       "iterations_with": 19, "peak_share": 0.25, "peak_iteration": 153}  # fmt: skip


def test_a_share_at_the_blend_weight_is_said_so() -> None:
    """Within the band the over-representation test does not call (1/1.5 to 1.5), the group is
    "sampled at its blend weight"; outside it, how many times its weight."""
    assert share_line(ROW | {"blend_ratio": 0.95}).endswith(
        "expected 7.8% (blend of stages 1-2): sampled at its blend weight (0.9x)"
    )
    assert share_line(ROW | {"blend_ratio": 2.3}).endswith(": sampled at 2.3x its blend weight")
    assert share_line(ROW | {"blend_ratio": 0.4}).endswith(": sampled at 0.4x its blend weight")
    assert "what the blend gives it" not in share_line(ROW | {"blend_ratio": 1.0})


def test_a_group_dense_since_a_stage_started_is_no_burst() -> None:
    dense = ROW | {"density": 3.0}
    burst = density_line(dense, 170, (131, 170), [1])
    assert burst.endswith("; a burst: 3.0x its even share in the window's last quarter")
    stage = density_line(dense | {"new_in_window": True}, 170, (131, 170), [1, 151])
    assert "burst" not in stage.replace("not a burst", "")
    assert "since the data stage starting at iteration 151 (a stage start, not a burst)" in stage
    # an old group that grows denser after a stage start is still a burst
    assert "a burst:" in density_line(dense, 170, (131, 170), [1, 151])


def test_block_list_and_counts_are_said_with_what_they_count() -> None:
    skip = ReportSkip.from_dict({"iterations": [[151, 170]], "trainer": "megatron-lm",
                                 "flags": {}, "documents": 150, "seen_in_window": 125})  # fmt: skip
    assert block_list_text(skip) == (
        "150 documents (125 drawn in the window + 25 more of the culprit's, not drawn in it) "
        "in skip.json"
    )
    import polars as pl

    clusters = pl.DataFrame({
        "verdict": ["culprit", "suspect", "suspect", "clean", "clean"],
        "explained_by": [None, "s1", None, "s1", None],
    })  # fmt: skip
    counts = cluster_counts(clusters)
    assert counts == {"culprit": 1, "suspect": 1, "suspect_inside_culprit": 1, "clean": 2,
                      "all": 5}  # fmt: skip
    assert counts_text(counts) == "1 culprit, 1 suspect (+1 inside a culprit), 2 clean; 5 clusters"
