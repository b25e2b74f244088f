"""Benchmark: rescoring samples/s on CPU, and the export of a 300-iteration window's tokens.

Rows, each with its anchor measured in the same run:
  export: replay        the replay table of iterations 1-300 at global batch 1024 x seq 4096
                        (a 3-way blend, indices built from nothing), as `replay --tokens` does
  export: gather+write  tokens.npy (307,200 x 4,097 uint16 = 2.5 GB) + index files
  anchor: raw copy      the same number of tokens copied in one contiguous run from a .bin
                        into an .npy (the floor for any gather)
  rescore: <model>      samples/s of forensics.rescore.checkpoint.token_losses (per-token float32
                        cross-entropy, copies to numpy) at seq 2048
  anchor: bare forward  samples/s of model(input_ids) alone on the same batch
  grad norm: <model>    s/sample of the per-sample gradient norm (--grad-norm)

Models: the tiny GPT-2 of scripts/train_tiny_run.py (2 x 128) and GPT-2 small's shape (12 x 768,
vocab 50,257: 124M parameters with embeddings, ~85M without), randomly initialised (timing
only). The .bin files are sparse (their tokens read as zeros from the page cache), so the export
time is the gather's, not the disk's.

    .venv/bin/python scripts/bench_rescore.py [--samples 4] [--skip-export | --skip-models]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from dataloaders.megatron.indexed import write_idx  # noqa: E402
from dataloaders.run_config import config_from_dict  # noqa: E402
from forensics.replay import open_replayer
from forensics.rescore.checkpoint import grad_norms, token_losses
from forensics.rescore.export import write_export


def make_dataset(prefix: Path, docs: int, mean: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    lengths = np.maximum(1, rng.geometric(1 / mean, size=docs)).astype(np.int32)
    write_idx(f"{prefix}.idx", lengths, np.arange(docs + 1), np.uint16)
    with open(f"{prefix}.bin", "wb") as out:
        out.truncate(int(lengths.sum(dtype=np.int64)) * 2)


def bench_export(work: Path, iters: int, gbs: int, seq: int) -> list[tuple[str, float, str]]:
    import polars as pl

    os.environ["FORENSICS_CACHE"] = str(work / "forensics-cache")
    specs = [("web", 2_000_000, 800, 0.5), ("code", 500_000, 2000, 0.3),
             ("books", 20_000, 50_000, 0.2)]  # fmt: skip
    for i, (name, docs, mean, _) in enumerate(specs):
        make_dataset(work / name, docs, mean, i)
    data = {
        "format": "megatron",
        "seq_length": seq,
        "split": "100,0,0",
        "blend": [{"name": n, "prefix": str(work / n), "weight": w} for n, _, _, w in specs],
    }
    config = config_from_dict(
        {"data": data, "training": {"global_batch_size": gbs, "train_iters": iters}},
        base_dir=work,
        source=None,
    )
    t0 = time.perf_counter()
    replayer = open_replayer(config)
    table = replayer.replay(1, iters, progress=False).with_columns(pl.lit("window").alias("side"))
    t_replay = time.perf_counter() - t0
    t0 = time.perf_counter()
    info = write_export(replayer, table, work / "export", {"window": [1, iters]})
    t_export = time.perf_counter() - t0
    size = info["samples"] * info["sample_length"] * 2
    shutil.rmtree(work / "export")
    src = np.asarray(replayer.datasets[replayer.specs["web"].prefix].tokens)
    t0 = time.perf_counter()
    raw = np.lib.format.open_memmap(
        work / "raw.npy", mode="w+", dtype=np.uint16, shape=(info["samples"], info["sample_length"])
    )
    flat, step = raw.reshape(-1), 1 << 25
    for lo in range(0, flat.size, step):  # one contiguous copy: the floor for any gather
        hi = min(lo + step, flat.size)
        flat[lo:hi] = src[lo:hi]
    raw.flush()
    del raw, flat
    t_raw = time.perf_counter() - t0
    (work / "raw.npy").unlink()
    what = f"{info['samples']:,} x {info['sample_length']:,} tokens, {size / 1e9:.2f} GB"
    return [
        ("export: replay (indices from nothing)", t_replay, f"{table.height:,} segments"),
        ("export: gather + write tokens.npy", t_export, what),
        ("anchor: one contiguous .bin -> .npy copy", t_raw, f"{size / 1e9 / t_raw:.2f} GB/s"),
    ]


def bench_model(name: str, config, samples: int, batch: int, seq: int, grad: bool) -> list:
    import torch
    from transformers import GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(config).eval()
    params = sum(p.numel() for p in model.parameters()) / 1e6
    tokens = np.random.default_rng(0).integers(0, config.vocab_size, size=(samples, seq + 1))
    tokens = tokens.astype(np.int32)
    token_losses(model, tokens[:1, :65], batch_size=1)  # warm-up
    t0 = time.perf_counter()
    token_losses(model, tokens, batch_size=batch)
    ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    with torch.inference_mode():
        for lo in range(0, samples, batch):
            model(input_ids=torch.as_tensor(tokens[lo : lo + batch, :-1].astype(np.int64)))
    bare = time.perf_counter() - t0
    rows = [
        (f"rescore: {name} ({params:.0f}M), seq {seq}", ours, f"{samples / ours:.2f} samples/s"),
        (f"anchor: bare forward, {name}", bare, f"{samples / bare:.2f} samples/s"),
    ]
    if grad:
        n = max(1, samples // 4)
        t0 = time.perf_counter()
        grad_norms(model, tokens[:n])
        g = time.perf_counter() - t0
        rows.append((f"grad norm: {name}, seq {seq}", g, f"{g / n:.2f} s/sample"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=4, help="samples for the 100M model")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-export", action="store_true")
    ap.add_argument("--skip-models", action="store_true")
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--gbs", type=int, default=1024)
    ap.add_argument("--export-seq", type=int, default=4096)
    args = ap.parse_args()

    import torch
    from transformers import GPT2Config

    torch.set_num_threads(args.threads)
    rows: list[tuple[str, float, str]] = []
    tiny = GPT2Config(vocab_size=2000, n_positions=args.seq, n_embd=128, n_layer=2, n_head=4,
                      bos_token_id=0, eos_token_id=0)  # fmt: skip
    if not args.skip_models:
        rows += bench_model("tiny GPT-2", tiny, 32, 8, args.seq, grad=True)
        small = GPT2Config(n_positions=args.seq)  # GPT-2 small's shape
        rows += bench_model("GPT-2 small shape", small, args.samples, 1, args.seq, grad=True)
    if not args.skip_export:
        work = Path(tempfile.mkdtemp(prefix="bench-rescore-"))
        try:
            rows += bench_export(work, args.iters, args.gbs, args.export_seq)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\ntorch threads: {args.threads}; CPU: {os.cpu_count()} cores (shared)")
    print(f"{'what':<44} {'seconds':>9}  note")
    for what, secs, note in rows:
        print(f"{what:<44} {secs:9.2f}  {note}")


if __name__ == "__main__":
    main()
