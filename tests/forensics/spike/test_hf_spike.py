"""`forensics spike` end to end on a streaming Hugging Face `datasets` run: one shard of mojibake
pages lands inside the window; the spike must blame it and skip the iterations that consumed it.

Where the dirty shard lands is taken from iterating the real pipeline (the library itself, not
our replay), so the test does not grade the replay with its own answer.
"""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
datasets = pytest.importorskip("datasets")

from forensics_testing.file_runs import DIRTY, ROWS, SIZE, WORLD  # noqa: E402
from forensics_testing.file_runs import build_hf_run as build_run  # noqa: E402


def test_spike_blames_the_dirty_shard_of_a_streaming_run(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from forensics.cli import app

    monkeypatch.setattr(datasets.config, "SLEEP_TIME_ON_THREADS_SHUTDOWN", 0)
    config, per_rank = build_run(tmp_path)
    dirty = set(range(DIRTY * ROWS, (DIRTY + 1) * ROWS))
    n_iters = min(len(b) for b in per_rank)
    hit = [
        i + 1 for i in range(n_iters) if any(u in dirty for batches in per_rank for u in batches[i])
    ]
    assert hit and hit[0] > 8, f"precondition: the dirty shard lands late enough ({hit})"
    step = hit[-1]
    window = step - hit[0] + 1
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "spike",
            "--config", str(config),
            "--step", str(step),
            "--window", str(window),
            "--baseline", f"1-{hit[0] - 2}",
            "--embed-cap", "0",
            "--out", str(out),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    skip = json.loads((out / "skip.json").read_text())
    blamed = set(skip["documents"]["hf"])
    # The blamed file's every row, also those the window never drew (they come later), listed
    # by the replayer from the files' row offsets.
    assert blamed == dirty, (len(blamed), skip["culprit_clusters"])
    in_window = {u for batches in per_rank for i in hit for u in batches[i - 1] if u in dirty}
    assert len(blamed & in_window) >= 0.8 * len(in_window)
    skipped = {i for a, b in skip["iterations"] for i in range(a, b + 1)}
    assert set(hit) <= skipped | set(range(1, skip["scope"][0]))
    assert skip["culprit_clusters"]
    assert skip["fingerprint"]["format"] == "hf"
    report = json.loads((out / "report.json").read_text())
    # the baseline (9 iterations) is too small, and an HF run has no mixture weights: it says so
    assert any("too small to judge" in n for n in report["notes"]), report["notes"]
    assert any("gives no mixture weights" in n for n in report["notes"]), report["notes"]
    assert all(c["expected_share"] is None for c in report["clusters"])


def test_replay_command_matches_the_real_pipeline(tmp_path):
    """`forensics replay` on an HF streaming config writes, per iteration and batch position,
    the documents the real pipeline yields (rank r's j-th example at r * batch + j)."""
    import polars as pl
    from typer.testing import CliRunner

    from forensics.cli import app

    config, per_rank = build_run(tmp_path)
    out = tmp_path / "window.parquet"
    result = CliRunner().invoke(
        app,
        ["replay", "--config", str(config), "--step", "12", "--window", "4", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    table = pl.read_parquet(out).sort("iteration", "position")
    expected = [
        (it, rank * SIZE + j, uid)
        for it in range(9, 13)
        for rank in range(WORLD)
        for j, uid in enumerate(per_rank[rank][it - 1])
    ]
    assert list(table.select("iteration", "position", "doc_id").iter_rows()) == expected
    assert table["exact"].all()
