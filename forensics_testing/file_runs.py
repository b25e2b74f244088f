"""Small file-based runs with one dirty file, for the spike and rebuild tests: a streaming Hugging
Face run (Parquet shards, one of mojibake pages), a two-stream MosaicML streaming run (one shard
of the forum stream dirty), and the pages and tokenizer of the OLMo-core runs.

The orders the real libraries yield come with the runs (the library itself iterated, in the
project venv for `datasets`, in the oracle venv for streaming), so the tests do not grade the
replay with its own answer.
"""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from forensics_testing.demo.build import EOD, _train_tokenizer
from forensics_testing.demo.dirty import dirty_page, site_name, web_page
from forensics_testing.demo.texts import harvest
from forensics_testing.mosaic_support import run_oracle, write_mds

HF_SHARDS, ROWS, DIRTY = 12, 40, 7  # shard 7 of 12 is the dirty crawl
HF_SEED, BUFFER, SIZE, WORLD = 5, 32, 8, 2


def build_hf_run(folder: Path) -> tuple[Path, list[list[int]]]:
    """Shards of clean web pages plus one dirty one; returns the config and, per rank, the uids
    of every batch as the real pipeline yields them."""
    import datasets
    from datasets.distributed import split_dataset_by_node

    prose = harvest(HF_SHARDS * ROWS, 0, seed=3)["prose"]
    assert len(prose) >= HF_SHARDS * ROWS, "not enough installed READMEs/docstrings"
    rng = random.Random(11)
    files = []
    uid = 0
    for s in range(HF_SHARDS):
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
            "seed": HF_SEED,
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
        ds = ds.shuffle(seed=HF_SEED, buffer_size=BUFFER, max_buffer_input_shards=1)
        ds = split_dataset_by_node(ds, rank=rank, world_size=WORLD)
        uids = [ex["uid"] for ex in ds]
        per_rank.append([uids[i : i + SIZE] for i in range(0, len(uids), SIZE)])
    return path, per_rank


MDS_SHARDS = {"web": [40, 40, 40, 40], "forum": [40, 40, 40]}
DIRTY_STREAM, DIRTY_SHARD = "forum", 1
BATCH, RANKS, WORKERS, MDS_SEED = 8, 2, 1, 21


def build_mosaic_run(folder: Path) -> tuple[Path, list[list[list[int]]], set[int]]:
    """The streams, the run config, per rank the uids of every batch as the real loaders yield
    them, and the dirty uids."""
    total = sum(sum(s) for s in MDS_SHARDS.values())
    prose = harvest(total, 0, seed=3)["prose"]
    assert len(prose) >= total, "not enough installed READMEs/docstrings"
    rng = random.Random(11)
    uid, dirty = 0, set()
    for name, shards in MDS_SHARDS.items():
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
    args = {
        "batch_size": BATCH,
        "shuffle": True,
        "shuffle_seed": MDS_SEED,
        "shuffle_block_size": 64,
    }
    spec = {
        "streams": [{"local": str(folder / name)} for name in MDS_SHARDS],
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
            "streams": [{"local": name} for name in MDS_SHARDS],
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


def olmo_pages(folder: Path, n: int) -> tuple[dict[str, list[str]], object]:
    """n pages each of web, books and forum (mojibake), and a BPE tokenizer trained on them
    (folder/tokenizer.json)."""
    # A page quoting the end-of-document literal would be split there by the run's EOS id 0:
    # which packages' docstrings quote it depends on what is installed, so such pages are left out.
    prose = [t for t in harvest(3 * n, 0, seed=4)["prose"] if EOD not in t.text]
    assert len(prose) >= 3 * n, "not enough installed READMEs/docstrings"
    rng = random.Random(8)
    texts = {
        "web": [web_page(t.text, site_name(rng), rng) for t in prose[:n]],
        "books": [t.text for t in prose[n : 2 * n]],
        "forum": [dirty_page("mojibake", i, t.text, rng)[0] for i, t in enumerate(prose[2 * n :])],
    }
    tok = _train_tokenizer([t for v in texts.values() for t in v], 3000, folder / "tokenizer.json")
    return texts, tok
