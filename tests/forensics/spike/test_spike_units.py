"""The spike pipeline's own logic: windows, baseline choice, output-directory guard, forward
exposure summary, block list. (The whole pipeline: tests/forensics/spike/test_spike_e2e.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from forensics.errors import ForensicsError
from forensics.pipeline import cache_key
from forensics.spike import (
    MARKER,
    ahead_advice,
    ahead_summary,
    check_output_dir,
    choose_baseline,
    crossings,
    documents_by_dataset,
    onset_iteration,
)


def test_default_baseline_is_ten_windows_back() -> None:
    (b, how) = choose_baseline((81001, 81300), [1], None, None)
    assert b == (77701, 78000) and "3000 iterations before" in how


def test_baseline_clamps_at_iteration_one_and_never_overlaps() -> None:
    assert choose_baseline((1961, 2260), [1, 2201], None, None)[0] == (1, 300)
    assert choose_baseline((101, 400), [1], None, None)[0] == (1, 100)  # only 100 before the window
    with pytest.raises(ForensicsError, match="nothing before it"):
        choose_baseline((1, 300), [1], None, None)


def test_baseline_options() -> None:
    assert choose_baseline((1001, 1300), [1], None, 50)[0] == (651, 950)
    assert choose_baseline((1001, 1300), [1], "100-399", None)[0] == (100, 399)
    assert choose_baseline((5001, 5300), [1, 4001], "stage", None)[0] == (4001, 4300)
    with pytest.raises(ForensicsError, match="overlaps"):
        choose_baseline((1001, 1300), [1], "1200-1400", None)
    with pytest.raises(ForensicsError, match="FIRST-LAST"):
        choose_baseline((1001, 1300), [1], "12OO-1400", None)
    with pytest.raises(ForensicsError, match="inside the window"):
        choose_baseline((1001, 1300), [1, 1100], "stage", None)


def test_crossings_name_stage_starts_inside_the_window() -> None:
    assert crossings((1961, 2260), [1, 2201, 3000]) == [2201]
    assert crossings((2201, 2260), [1, 2201]) == []  # starting on the seam is not crossing it


def test_output_dir_guard(tmp_path: Path) -> None:
    out = tmp_path / "spike"
    check_output_dir(out, "abc", 10, force=False)  # absent: fine
    (out / ".cache").mkdir(parents=True)
    (out / ".cache" / MARKER).write_text(json.dumps({"config_hash": "abc", "step": 10}))
    check_output_dir(out, "abc", 10, force=False)  # same run: resumable
    with pytest.raises(ForensicsError, match="older run"):
        check_output_dir(out, "abc", 11, force=False)
    with pytest.raises(ForensicsError, match="older run"):
        check_output_dir(out, "xyz", 10, force=False)
    check_output_dir(out, "xyz", 10, force=True)
    (out / "skip.json").write_text("{}")
    with pytest.raises(ForensicsError, match="skip.json: already exists"):
        check_output_dir(out, "abc", 10, force=False)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "a.txt").write_text("x")
    with pytest.raises(ForensicsError, match="not a forensics spike run"):
        check_output_dir(foreign, "abc", 10, force=False)
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(ForensicsError, match="not a directory"):
        check_output_dir(afile, "abc", 10, force=True)


def test_ahead_summary_and_advice() -> None:
    ahead = pl.DataFrame(
        {
            "iteration": [11, 12, 13, 14],
            "samples": [10, 10, 10, 10],
            "flagged_samples": [0, 5, 1, 0],
        }
    )
    s = ahead_summary(ahead, dense_share=0.25, top=2)
    assert s["share_of_remaining_samples"] == pytest.approx(6 / 40)
    assert s["iterations_holding_it"] == 2 and s["dense_iterations"] == 1
    assert s["densest"] == [[12, 0.5], [13, 0.1]]
    assert "--skip-ahead" in ahead_advice(s)
    everywhere = ahead.with_columns(pl.lit(2).alias("flagged_samples"))
    assert "cannot avoid it" in ahead_advice(ahead_summary(everywhere, 0.25))
    none = ahead.with_columns(pl.lit(0).alias("flagged_samples"))
    assert "does not occur again" in ahead_advice(ahead_summary(none, 0.25))


def test_block_list_and_onset() -> None:
    culprit = pl.DataFrame(
        {"dataset": ["web", "code", "web", "web"], "doc_id": [7, 3, 2, 7], "cluster": ["s1"] * 4}
    )
    assert documents_by_dataset(culprit) == {"code": [3], "web": [2, 7]}
    replay = pl.DataFrame(
        {"iteration": [5, 6, 7], "dataset": ["web", "web", "code"], "doc_id": [1, 2, 3]}
    )
    assert onset_iteration(replay, culprit) == 6
    assert onset_iteration(replay.head(1), culprit) is None


def test_cache_key_is_stable_and_sensitive() -> None:
    assert cache_key(a=1, b=(2, 3)) == cache_key(b=[2, 3], a=1)
    assert cache_key(a=1) != cache_key(a=2)


def test_spike_notes_carry_triages_events_around_the_window() -> None:
    """The spike report tells triage's story: the malignant spike's verdict is a note, events
    far before the window are not."""
    from forensics.spike.reporting import triage_notes
    from forensics_testing import loss_curves

    frame = loss_curves.make("malignant_step")  # a malignant spike at step 3000
    notes = triage_notes(frame, (2701, 3000))
    assert any(n.startswith("triage: spike (malignant) at 3000") for n in notes), notes
    assert triage_notes(frame, (1001, 1300), late=100) == []
