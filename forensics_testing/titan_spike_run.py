"""A tiny torchtitan run with one dirty file, for `forensics spike` and `forensics rebuild` end
to end: one map-style source of Parquet shards of web pages (shard DIRTY of mojibake pages), a
byte-level BPE tokenizer folder as torchtitan's hf_assets_path, and a checkpoint folder of
`step-N` DCP checkpoints as torchtitan's CheckpointManager names them
(components/checkpointer/dcp.py:686-690, `{checkpoint.folder}/step-{step}`)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from forensics_testing.demo.build import EOD, _train_tokenizer
from forensics_testing.demo.dirty import dirty_page, site_name, web_page
from forensics_testing.demo.texts import harvest

__all__ = ["CHECKPOINTS", "DIRTY", "ROWS", "SHARDS", "build_titan_run"]

SHARDS, ROWS, DIRTY = 8, 30, 5  # shard 5 of 8 is the dirty crawl
SEQ_LEN, LOCAL_BATCH, DP = 256, 2, 2
CHECKPOINTS = (4, 8, 12, 16, 20)
BOS = "<|begin_of_text|>"


def build_titan_run(folder: Path) -> Path:
    """The run's files under `folder`; returns its forensics config (training.trainer is the
    family's default: torchtitan)."""
    prose = [t for t in harvest(SHARDS * ROWS, 0, seed=3)["prose"] if EOD not in t.text]
    assert len(prose) >= SHARDS * ROWS, "not enough installed READMEs/docstrings"
    rng = random.Random(11)
    files, texts = [], []
    for s in range(SHARDS):
        rows = prose[s * ROWS : (s + 1) * ROWS]
        shard = [
            dirty_page("mojibake", i, t.text, rng)[0]
            if s == DIRTY
            else web_page(t.text, site_name(rng), rng)
            for i, t in enumerate(rows)
        ]
        texts += shard
        path = folder / "data" / f"web-{s:02d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"text": shard, "crawl": [f"crawl-{s // 4}"] * ROWS}), path)
        files.append(str(path))
    assets = folder / "assets"
    assets.mkdir()
    _train_tokenizer(texts, 2000, assets / "tokenizer.json")
    config = {"bos_token": BOS, "eos_token": EOD}  # torchtitan adds them as special tokens
    (assets / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    _checkpoints(folder / "outputs" / "checkpoint")
    raw = {
        "name": "titan-tiny",
        "data": {
            "format": "torchtitan",
            "sources": [{"name": "web", "files": files, "provenance_fields": ["crawl"]}],
            "seq_len": SEQ_LEN,
            "local_batch_size": LOCAL_BATCH,
            "dp_world_size": DP,
        },
        "training": {"global_batch_size": 2 * LOCAL_BATCH * DP, "train_iters": 60},
        "tokenizer": str(assets),
        "checkpoint_dir": str(folder / "outputs" / "checkpoint"),
    }
    path = folder / "run.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def _checkpoints(folder: Path) -> None:
    """`step-N` folders as DCP writes them (shards, then `.metadata`), each holding the trainer's
    `train_state` (trainer.py:1078-1079: step and ntokens_seen)."""
    import torch
    import torch.distributed.checkpoint as dcp

    for step in CHECKPOINTS:
        state = {"train_state": {"step": torch.tensor(step), "ntokens_seen": torch.tensor(0)}}
        dcp.save(state, checkpoint_id=str(folder / f"step-{step}"))
