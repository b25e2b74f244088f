"""`forensics spike` end to end on a MosaicML streaming run: two streams, one shard of the forum
stream is a crawl of mojibake pages; the spike must blame those samples and skip the iterations
that consumed them.

Where the dirty shard lands is taken from iterating the real StreamingDataset + DataLoader (the
oracle venv, tests/mosaic_support.py), not from our replay, so the test does not grade the replay
with its own answer.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import yaml
from mosaic_support import run_oracle, write_mds

from forensics_testing.demo.dirty import dirty_page, site_name, web_page
from forensics_testing.demo.texts import harvest

SHARDS = {"web": [40, 40, 40, 40], "forum": [40, 40, 40]}
DIRTY_STREAM, DIRTY_SHARD = "forum", 1
BATCH, RANKS, WORKERS, SEED = 8, 2, 1, 21


def build_run(folder: Path) -> tuple[Path, list[list[list[int]]], set[int]]:
    """The streams, the run config, per rank the uids of every batch as the real loaders yield
    them, and the dirty uids."""
    total = sum(sum(s) for s in SHARDS.values())
    prose = harvest(total, 0, seed=3)["prose"]
    assert len(prose) >= total, "not enough installed READMEs/docstrings"
    rng = random.Random(11)
    uid, dirty = 0, set()
    for name, shards in SHARDS.items():
        rows = []
        for k, n in enumerate(shards):
            for i in range(n):
                body = prose[uid].text
                if name == DIRTY_STREAM and k == DIRTY_SHARD:
                    text = dirty_page("mojibake", i, body, rng)[0]
                    dirty.add(uid)
                else:
                    text = web_page(body, site_name(rng), rng)
                rows.append({"text": text, "uid": uid, "source": f"{name}-crawl-{k}"})
                uid += 1
        write_mds(folder / name, rows, shards)
    args = {"batch_size": BATCH, "shuffle": True, "shuffle_seed": SEED, "shuffle_block_size": 64}
    spec = {
        "streams": [{"local": str(folder / name)} for name in SHARDS],
        "dataset": args,
        "num_workers": WORKERS,
        "drop_last": True,
        "epochs": 1,
    }
    per_rank = [r["epochs"][0] for r in run_oracle(spec, folder / "oracle", ranks_per_node=RANKS)]
    config = {
        "name": "mosaic-run",
        "data": {
            "format": "mosaic-streaming",
            "streams": [{"local": name} for name in SHARDS],
            **args,
            "ranks_per_node": RANKS,
            "num_workers": WORKERS,
            "drop_last": True,
            "provenance_fields": ["source"],
        },
        "training": {"global_batch_size": BATCH * RANKS, "train_iters": len(per_rank[0])},
        "checkpoints": [4, 8, 12],
    }
    path = folder / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, per_rank, dirty


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
