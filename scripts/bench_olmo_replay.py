"""Benchmark: replaying an OLMo-core run's 300-iteration window at global batch 1024 instances.

Generates token files (uint16, EOS-terminated documents) holding enough instances for the
window, then times, in one run:
- the anchor: OLMo-core's own NumpyFSLDataLoader (ai2-olmo-core 3.0.0 in .venv-olmo, built by
  scripts/olmo_oracle_env.sh) iterated by every DP rank to the window's last step, as a job
  (or dump_training_batch.py, which builds the same loader) must do to see those batches;
- our replay from nothing (empty cache: rebuilds the global indices and scans the token files
  for document boundaries) and from cache (a fresh replayer, warm on-disk cache).
It checks that our window holds the instances the library yielded, then prints one table.

    .venv/bin/python scripts/bench_olmo_replay.py [--window 300] [--batch 1024] [--seq 128]
        [--world 8] [--files 16]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dataloaders.run_config import load_config
from forensics.replay import open_replayer

ROOT = Path(__file__).resolve().parents[1]

import numpy as np  # noqa: E402
import yaml  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

LIBRARY = r"""
import json, sys, time
import numpy as np
from olmo_core.data import DataCollator, NumpyDataLoaderBase, NumpyFSLDataset
spec = json.loads(sys.argv[1])
t0 = time.perf_counter()
ds = NumpyFSLDataset(*spec["paths"], sequence_length=spec["seq"], pad_token_id=1,
                     eos_token_id=0, vocab_size=50000, dtype=np.uint16)
ds.work_dir = spec["work_dir"]
ds.prepare()
index = {}
for rank in range(spec["world"]):
    loader = NumpyDataLoaderBase.wrap_numpy_dataset(
        ds, global_batch_size=spec["batch"] * spec["seq"], collator=DataCollator(pad_token_id=1),
        work_dir=spec["work_dir"], seed=spec["seed"], dp_world_size=spec["world"], dp_rank=rank,
        fs_local_rank=0)
    loader.reshuffle(1)
    for step, batch in enumerate(loader, start=1):
        if step > spec["first"] - 1:
            index.setdefault(step, []).extend(batch["index"].tolist())
        if step == spec["last"]:
            break
print(json.dumps({"seconds": time.perf_counter() - t0, "index": index}))
"""


def write_files(folder: Path, files: int, tokens: int, rng: np.random.Generator) -> list[str]:
    names = []
    per = tokens // files + 1
    for k in range(files):
        data = rng.integers(2, 50000, size=per, dtype=np.uint16)
        eos = np.cumsum(rng.integers(50, 900, size=per // 50))
        data[eos[eos < per]] = 0
        name = f"part-{k:03d}.npy"
        data.tofile(folder / name)
        names.append(name)
    return names


def timed_replay(config: Path, first: int, last: int) -> tuple[float, object]:
    t0 = time.perf_counter()
    table = open_replayer(load_config(config)).replay(first, last, progress=False)
    return time.perf_counter() - t0, table


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--window", type=int, default=300)
    parser.add_argument("--batch", type=int, default=1024, help="global batch in instances")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--world", type=int, default=8)
    parser.add_argument("--files", type=int, default=16)
    args = parser.parse_args()
    oracle = ROOT / ".venv-olmo" / "bin" / "python"
    if not oracle.exists():
        subprocess.run(
            ["bash", str(ROOT / "scripts/olmo_oracle_env.sh"), sys.executable], check=True
        )

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        os.environ["FORENSICS_CACHE"] = str(folder / "cache")
        first, last = 1, args.window
        instances = (last + 10) * args.batch
        names = write_files(folder, args.files, instances * args.seq, np.random.default_rng(0))
        config = {
            "data": {
                "format": "olmo-core",
                "sources": [{"name": "web", "paths": names}],
                "sequence_length": args.seq,
                "eos_token_id": 0,
                "pad_token_id": 1,
                "vocab_size": 50000,
                "global_batch_size": args.batch * args.seq,
                "seed": 34521,
                "dp_world_size": args.world,
            },
            "training": {"global_batch_size": args.batch, "train_iters": last},
        }
        path = folder / "run.yaml"
        path.write_text(yaml.safe_dump(config))
        spec = {
            "paths": [str(folder / n) for n in names],
            "seq": args.seq,
            "batch": args.batch,
            "world": args.world,
            "seed": 34521,
            "work_dir": str(folder / "olmo-work"),
            "first": first,
            "last": last,
        }
        proc = subprocess.run(
            [str(oracle), "-c", LIBRARY, json.dumps(spec)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise SystemExit(proc.stderr[-2000:])
        lib = json.loads(proc.stdout.strip().splitlines()[-1])
        cold, table = timed_replay(path, first, last)
        warm, again = timed_replay(path, first, last)
        samples = table.unique(["iteration", "position"]).sort("iteration", "position")
        ours: dict[str, list[int]] = {}
        for it, inst in samples.select("iteration", "dataset_sample").iter_rows():
            ours.setdefault(str(it), []).append(inst)
        assert ours == lib["index"], "our window differs from the library's batches"
        assert again.equals(table)

    title = (
        f"OLMo-core replay: iterations {first}-{last}, global batch {args.batch} x "
        f"{args.seq} tokens, {args.world} DP ranks, {args.files} token files"
    )
    out = Table(title=title)
    out.add_column("what")
    out.add_column("seconds", justify="right")
    out.add_column("vs library", justify="right")
    rows = [
        ("library: NumpyFSLDataLoader, every rank to the window's end", lib["seconds"]),
        ("forensics replay, from nothing", cold),
        ("forensics replay, from cache", warm),
    ]
    for name, secs in rows:
        out.add_row(name, f"{secs:.2f}", f"{lib['seconds'] / secs:.1f}x")
    Console().print(out)
    print(f"table: {table.height:,} document segments; identical to the library's instances")


if __name__ == "__main__":
    main()
