"""Benchmark: replay a 300-iteration window (global batch 1024, sequence 4096) of a 3-way blend.

Rows, all in one process on the same data:
  megatron-core build    BlendedMegatronDatasetBuilder building the train indices (C++ helpers),
                         writing its --data-cache-path as a real run does
  ours, from nothing     open the replayer + replay the window, no cache anywhere
  ours, save cache       storing our indices for the next replay (done after the output)
  ours, warm own cache   a new replayer + the same window from our cache
  ours, megatron cache   a new replayer reading megatron-core's .npy cache (checked, mmap)
  ours, exposure         samples touching 1000 flagged documents, every iteration of the run
                         (warm indices; the forward-exposure scan of `forensics spike`)

The three tables are checked identical, and our index arrays are checked against megatron-core's.
The .bin files are sparse (index building reads only the .idx); sizes are realistic: 2M web
documents (~800 tokens), 500k code (~2k), 20k books (~50k).

    .venv/bin/python scripts/bench_replay.py [--iters 5000 --step 4000 --window 300]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from dataloaders.megatron.blending import build_blending_indices
from dataloaders.megatron.gpt_indices import document_ends
from dataloaders.megatron.indexed import write_idx  # noqa: E402
from dataloaders.megatron.legacy_shuffle import legacy_shuffle
from dataloaders.megatron.segments import fill_segments, sample_spans
from dataloaders.run_config import config_from_dict  # noqa: E402
from forensics.replay import open_replayer
from forensics.window import check_window


def make_dataset(prefix: Path, docs: int, mean: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    lengths = np.maximum(1, rng.geometric(1 / mean, size=docs)).astype(np.int32)
    write_idx(f"{prefix}.idx", lengths, np.arange(docs + 1), np.uint16)
    with open(f"{prefix}.bin", "wb") as out:
        out.truncate(int(lengths.sum(dtype=np.int64)) * 2)  # sparse: only .idx is read


def warm_fill_kernels() -> None:
    """Load the replay table's compiled loops for the arrays a build and a cache hand them
    (writable and read-only), as the row above does for the index builders."""
    one = np.zeros(1, dtype=np.int64)
    for writable in (True, False):
        doc = np.zeros(2, dtype=np.int32)
        rows = np.zeros((2, 2), dtype=np.int32)
        shuffle = np.zeros(1, dtype=np.uint32)
        for arr in (doc, rows, shuffle):
            arr.flags.writeable = writable
        sample_spans(shuffle, rows, one)
        out = {n: np.zeros(1, dtype=np.int64) for n in ("sequence", "token_start", "token_end")}
        fill_segments(one, one, one - 1, one, one, doc, doc, 0, out)


def megatron_build(prefixes, weights, n, seq, seed, cache):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch.distributed as dist
        from megatron.core.datasets.blended_megatron_dataset_builder import (
            BlendedMegatronDatasetBuilder,
        )
        from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

        if not dist.is_initialized():
            store = Path(tempfile.mkdtemp()) / "store"
            dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)

        class Tok:
            vocab_size, eod, pad = 65000, 0, 64999
            unique_identifiers = {"class": "BenchTokenizer"}

        config = GPTDatasetConfig(
            random_seed=seed,
            sequence_length=seq,
            blend=([str(p) for p in prefixes], weights),
            split="100,0,0",
            path_to_cache=str(cache),
            reset_position_ids=False,
            reset_attention_mask=False,
            eod_mask_loss=False,
            tokenizer=Tok(),
        )
        t0 = time.perf_counter()
        built = BlendedMegatronDatasetBuilder(GPTDataset, [n, 0, 0], lambda: True, config).build()
        return built[0], time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=5000)
    ap.add_argument("--step", type=int, default=4000)
    ap.add_argument("--window", type=int, default=300)
    ap.add_argument("--gbs", type=int, default=1024)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=3, help="runs per row; the minimum is shown")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    os.environ["FORENSICS_CACHE"] = str(work / "forensics-cache")
    specs = [
        ("web", 2_000_000, 800, 0.5),
        ("code", 500_000, 2000, 0.3),
        ("books", 20_000, 50_000, 0.2),
    ]
    prefixes = []
    for i, (name, docs, mean, _) in enumerate(specs):
        make_dataset(work / name, docs, mean, i)
        prefixes.append(work / name)
    weights = [w for *_, w in specs]

    def config(cache: Path | None):
        data = {
            "format": "megatron",
            "seq_length": args.seq,
            "split": "100,0,0",
            "blend": [
                {"name": n, "prefix": str(p), "weight": w}
                for (n, *_, w), p in zip(specs, prefixes, strict=True)
            ],
        }
        if cache is not None:
            data["cache_path"] = str(cache)
        training = {"global_batch_size": args.gbs, "train_iters": args.iters}
        return config_from_dict({"data": data, "training": training}, base_dir=work, source=None)

    rows: list[tuple[str, float, str]] = []
    t0 = time.perf_counter()
    # numba: load (or compile, first run ever) the blend loop, the shuffle and the token sums
    build_blending_indices([0.5, 0.5], 10)
    legacy_shuffle(np.random.RandomState(0), np.arange(10, dtype=np.int32))
    document_ends(np.ones(4, dtype=np.int32), np.arange(4, dtype=np.int32))
    warm_fill_kernels()
    rows.append(("numba loops load/compile", time.perf_counter() - t0, "once per process"))

    def replay(cache: Path | None):
        t0 = time.perf_counter()
        replayer = open_replayer(config(cache))
        first, last = check_window(replayer, args.step, args.window)
        table = replayer.replay(first, last, progress=False)
        return replayer, table, time.perf_counter() - t0

    def fresh_own_cache(rep: int) -> None:
        os.environ["FORENSICS_CACHE"] = str(work / f"forensics-cache-{rep}")

    # Each measurement is repeated (fresh caches where "from nothing"); the minimum is shown,
    # because other processes share this machine's two cores.
    cold_times, save_times, warm_times, meg_times, megc_times = [], [], [], [], []
    cold = warm = from_meg = None
    same = True
    for rep in range(args.repeat):
        fresh_own_cache(rep)
        replayer, cold, t = replay(None)
        cold_times.append(t)
        t0 = time.perf_counter()
        replayer.save_cache()
        save_times.append(time.perf_counter() - t0)
        _, warm, t = replay(None)
        warm_times.append(t)
        mcache = work / f"megatron-cache-{rep}"
        blended, t = megatron_build(
            prefixes, weights, args.iters * args.gbs, args.seq, 1234, mcache
        )
        meg_times.append(t)
        stage = replayer.stage(0)
        same = (
            same
            and all(
                np.array_equal(ours.document_index, theirs.document_index)
                and np.array_equal(ours.shuffle_index, theirs.shuffle_index)
                and np.array_equal(ours.full_sample_index(), theirs.sample_index)
                for ours, theirs in zip(stage.sources, blended.datasets, strict=True)
            )
            and np.array_equal(stage.dataset_index, blended.dataset_index)
        )
        del blended
        fresh_own_cache(100 + rep)  # no own cache: read megatron-core's
        _, from_meg, t = replay(mcache)
        megc_times.append(t)

    assert cold is not None and warm is not None and from_meg is not None
    # Forward exposure: flag 1000 documents, scan the whole run (warm cache).
    import polars as pl

    fresh_own_cache(0)  # warm: the indices are loaded, not rebuilt, before the clock starts
    expo_replayer = open_replayer(config(None))
    expo_replayer.stage(0)
    flagged = cold.select("dataset", "doc_id").unique().head(1000)
    t0 = time.perf_counter()
    expo = expo_replayer.exposure(flagged, 1, expo_replayer.last_iteration)
    t_expo = time.perf_counter() - t0
    total = int(expo["samples"].sum())
    hit = int(expo.select(pl.col("flagged_samples").sum()).item())
    n_samples = cold["sample_index"].n_unique()
    rows += [
        ("ours, from nothing", min(cold_times), f"{n_samples} samples, {cold.height} segments"),
        ("ours, save cache", min(save_times), "after the output is written"),
        (
            "ours, warm own cache",
            min(warm_times),
            "identical" if warm.equals(cold) else "DIFFERENT",
        ),
        ("megatron-core build (train)", min(meg_times), "C++ helpers, writes its cache"),
        ("ours, exposure whole run", t_expo, f"{total} samples scanned, {hit} flagged"),
        ("  index arrays vs megatron-core", 0.0, "identical" if same else "DIFFERENT"),
        (
            "ours, megatron cache",
            min(megc_times),
            "identical" if from_meg.equals(cold) else "DIFFERENT",
        ),
    ]

    print(
        f"\nreplay window {args.step - args.window + 1}-{args.step}, gbs {args.gbs}, "
        f"seq {args.seq}, train_iters {args.iters}, 3-way blend, best of {args.repeat}\n"
    )
    print(f"{'what':34} {'seconds':>9}  note")
    print("-" * 80)
    for what, sec, note in rows:
        print(f"{what:34} {sec:9.3f}  {note}")
    ratio = min(cold_times) / min(meg_times)
    print("-" * 80)
    print(f"ours from nothing / megatron-core build: {ratio:.2f}x (goal <= 0.50x)")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
