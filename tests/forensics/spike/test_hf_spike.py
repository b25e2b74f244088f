"""`forensics spike` end to end on a streaming Hugging Face `datasets` run: one shard of mojibake
pages lands inside the window; the spike must blame it and skip the iterations that consumed it.

Where the dirty shard lands is taken from iterating the real pipeline (the library itself, not
our replay), so the test does not grade the replay with its own answer.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

os.environ.setdefault("HF_HUB_OFFLINE", "1")
datasets = pytest.importorskip("datasets")

from forensics_testing.demo.dirty import dirty_page, site_name, web_page  # noqa: E402
from forensics_testing.demo.texts import harvest  # noqa: E402

SHARDS, ROWS, DIRTY = 12, 40, 7  # shard 7 of 12 is the dirty crawl
SEED, BUFFER, SIZE, WORLD = 5, 32, 8, 2


def build_run(folder: Path) -> tuple[Path, list[list[int]]]:
    """Shards of clean web pages plus one dirty one; returns the config and, per rank, the uids
    of every batch as the real pipeline yields them."""
    from datasets.distributed import split_dataset_by_node

    prose = harvest(SHARDS * ROWS, 0, seed=3)["prose"]
    assert len(prose) >= SHARDS * ROWS, "not enough installed READMEs/docstrings"
    rng = random.Random(11)
    files = []
    uid = 0
    for s in range(SHARDS):
        texts = []
        for i in range(ROWS):
            page = web_page(prose[uid + i].text, site_name(rng), rng)
            texts.append(
                dirty_page("mojibake", i, prose[uid + i].text, rng)[0] if s == DIRTY else page
            )
        table = pa.table(
            {
                "text": texts,
                "uid": list(range(uid, uid + ROWS)),
                "crawl": [f"crawl-{s // 4}"] * ROWS,
            }
        )
        name = f"web-{s:02d}.parquet"
        pq.write_table(table, folder / name, row_group_size=10)
        files.append(name)
        uid += ROWS
    config = {
        "name": "hf-stream",
        "data": {
            "format": "hf",
            "files": files,
            "streaming": True,
            "datasets_version": datasets.__version__,
            "seed": SEED,
            "buffer_size": BUFFER,
            "max_buffer_input_shards": 1,
            "world_size": WORLD,
            "per_device_batch_size": SIZE,
            "provenance_fields": ["crawl"],
        },
        "training": {"global_batch_size": SIZE * WORLD, "train_iters": 30},
        "checkpoints": [5, 10, 15, 20, 25],
    }
    path = folder / "run.yaml"
    path.write_text(yaml.safe_dump(config))

    per_rank = []
    for rank in range(WORLD):
        paths = [str(folder / f) for f in files]
        ds = datasets.load_dataset("parquet", data_files=paths, split="train", streaming=True)
        ds = ds.shuffle(seed=SEED, buffer_size=BUFFER, max_buffer_input_shards=1)
        ds = split_dataset_by_node(ds, rank=rank, world_size=WORLD)
        uids = [ex["uid"] for ex in ds]
        per_rank.append([uids[i : i + SIZE] for i in range(0, len(uids), SIZE)])
    return path, per_rank


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
