"""`forensics spike` end to end on a MosaicML streaming run: two streams, one shard of the forum
stream is a crawl of mojibake pages; the spike must blame those samples and skip the iterations
that consumed them.

Where the dirty shard lands is taken from iterating the real StreamingDataset + DataLoader (the
oracle venv, forensics_testing/mosaic_support.py), not from our replay, so the test does not grade
the replay
with its own answer.
"""

from __future__ import annotations

import json
from pathlib import Path

from forensics_testing.file_runs import DIRTY_STREAM
from forensics_testing.file_runs import MDS_SHARDS as SHARDS
from forensics_testing.file_runs import build_mosaic_run as build_run


def test_spike_blames_the_dirty_shard_of_a_streaming_run(tmp_path: Path):
    from typer.testing import CliRunner

    from forensics.cli import app

    config, per_rank, dirty = build_run(tmp_path)
    n_iters = len(per_rank[0])
    hit = [i + 1 for i in range(n_iters) if any(u in dirty for b in per_rank for u in b[i])]
    assert hit and hit[0] > 6, f"precondition: the dirty shard lands late enough ({hit})"
    step = hit[-1]
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "spike",
            "--config", str(config),
            "--step", str(step),
            "--window", str(step - hit[0] + 1),
            "--baseline", f"1-{hit[0] - 2}",
            "--embed-cap", "0",
            "--out", str(out),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    skip = json.loads((out / "skip.json").read_text())
    offset = sum(SHARDS["web"])  # forum's doc_id 0 is uid 160
    blamed = {offset + d for d in skip["documents"][DIRTY_STREAM]}
    assert blamed == dirty, (len(blamed), skip["culprit_clusters"])  # the whole shard
    assert not skip["documents"].get("web")
    in_window = {u for b in per_rank for i in hit for u in b[i - 1] if u in dirty}
    assert len(blamed & in_window) >= 0.8 * len(in_window)
    skipped = {i for a, b in skip["iterations"] for i in range(a, b + 1)}
    assert set(hit) <= skipped | set(range(1, skip["scope"][0]))
    assert skip["fingerprint"]["format"] == "mosaic-streaming"
    # streams without weights: an epoch takes every sample once, so forum is expected at its
    # share of all samples
    report = json.loads((out / "report.json").read_text())
    forum = next(c for c in report["clusters"] if (c["facet"], c["key"]) == ("dataset", "forum"))
    want = sum(SHARDS["forum"]) / sum(sum(s) for s in SHARDS.values())
    assert abs(forum["expected_share"] - want) < 1e-12 and forum["blend_stages"] == "stage 1"
