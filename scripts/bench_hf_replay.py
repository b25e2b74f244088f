"""Benchmark: replaying a streaming Hugging Face `datasets` run.

Generates N documents in S Parquet shards, then times our replay (the real library on id-only
tables) against the obvious alternative, iterating the real pipeline with its text for every rank.

    .venv/bin/python scripts/bench_hf_replay.py [--docs 100000] [--shards 32] [--world 8]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from dataloaders.hf import open_hf_replayer
from dataloaders.run_config import config_from_dict

WORDS = np.array("the of and to in data model loss batch token shard web crawl page".split())


def write(folder: Path, docs: int, shards: int) -> list[str]:
    rng = np.random.default_rng(0)
    names = []
    per = docs // shards
    for s in range(shards):
        words = rng.choice(WORDS, size=(per, 80))
        text = [" ".join(row) for row in words]
        table = pa.table({"text": text, "url": [f"https://x{s}.org/{i}" for i in range(per)]})
        name = f"part-{s:04d}.parquet"
        pq.write_table(table, folder / name, row_group_size=1000)
        names.append(name)
    return names


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--shards", type=int, default=32)
    parser.add_argument("--world", type=int, default=8)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()

    import datasets

    datasets.config.SLEEP_TIME_ON_THREADS_SHUTDOWN = 0  # the real stream's 5 s Arrow workaround
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        os.environ["FORENSICS_CACHE"] = str(folder / "cache")
        t = time.perf_counter()
        files = write(folder, args.docs, args.shards)
        size_mb = sum((folder / f).stat().st_size for f in files) / 1e6
        rows.append(
            ("generate shards", f"{args.docs:,} docs, {size_mb:.0f} MB", time.perf_counter() - t)
        )
        data = {
            "format": "hf",
            "files": files,
            "streaming": True,
            "datasets_version": datasets.__version__,
            "seed": 1234,
            "buffer_size": 10_000,
            "world_size": args.world,
            "num_workers": args.workers,
            "per_device_batch_size": 16,
            "provenance_fields": ["url"],
        }
        gbs = 16 * args.world
        raw = {"data": data, "training": {"global_batch_size": gbs, "train_iters": 10**9}}
        config = config_from_dict(raw, base_dir=folder, source=None)

        t = time.perf_counter()
        replayer = open_hf_replayer(config)
        rows.append(("open (validate files, fields)", "", time.perf_counter() - t))
        t = time.perf_counter()
        last = replayer.last_iteration
        rows.append(
            (
                "order of the whole run (all ranks, workers)",
                f"{last:,} iterations",
                time.perf_counter() - t,
            )
        )
        t = time.perf_counter()
        window = replayer.replay(max(1, last - 299), last, text=True, progress=False)
        rows.append(
            ("replay 300 iterations with text", f"{len(window):,} rows", time.perf_counter() - t)
        )
        flagged = pl.DataFrame({"dataset": "hf", "doc_id": np.arange(0, args.docs, 97)})
        t = time.perf_counter()
        exposure = replayer.exposure(flagged, 1, last)
        rows.append(
            (
                "exposure of 1% of docs, whole run",
                f"{int(exposure['flagged_samples'].sum()):,} hits",
                time.perf_counter() - t,
            )
        )

        t = time.perf_counter()
        again = open_hf_replayer(config)
        assert again.last_iteration == last
        rows.append(("open + order again (from the cache)", "", time.perf_counter() - t))

        from datasets.distributed import split_dataset_by_node

        t = time.perf_counter()
        paths = [str(folder / f) for f in files]
        ds = datasets.load_dataset("parquet", data_files=paths, split="train", streaming=True)
        ds = ds.shuffle(seed=1234, buffer_size=10_000)
        ds = split_dataset_by_node(ds, rank=0, world_size=args.world)
        n = sum(1 for _ in ds)
        one = time.perf_counter() - t
        rows.append(("real pipeline with text, rank 0 only", f"{n:,} docs", one))
        rows.append(("  x world size (every rank)", "estimate", one * args.world))

    table = Table(title=f"HF streaming replay ({args.shards} shards, world {args.world})")
    table.add_column("step")
    table.add_column("size")
    table.add_column("seconds", justify="right")
    for step, size, sec in rows:
        table.add_row(step, size, f"{sec:.2f}")
    Console().print(table)


if __name__ == "__main__":
    main()
