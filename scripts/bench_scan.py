"""Benchmark `forensics scan`: local engine and Ray with 1 and 2 workers, against a plain loop.

    python scripts/bench_scan.py [--tokens 1e9] [--iterations 40] [--run DIR]

Builds (once, cached in --run) a generated Megatron run of --tokens tokens (forensics/scan/
synthetic.py: real harvested text and a real BPE; documents past the harvested pool are token
recombinations of it), then scans --iterations iterations of it with:

    plain       the shard function called in a for loop in this process (the anchor)
    local 1/2   the process-pool engine with 1 and 2 workers
    ray 1/2     Ray Data on a local Ray instance with 1 and 2 worker tasks

Each configuration runs in a fresh Python process (so its driver's peak memory is its own) and
writes into a fresh output directory (no resumption). Printed per row: wall seconds, documents/s
(distinct documents decoded and scored), tokens/s (training tokens of the scanned samples),
document tokens/s (whole documents decoded), tokens per CPU-second of the workers, driver and
worker peak private memory (RssAnon, sampled; the mapped .bin/.idx pages, which are page cache,
and Ray's own daemons, raylet and GCS, are not counted), and the speed relative to the plain
loop.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from dataloaders.run_config import load_config
from forensics.replay import open_replayer
from forensics.scan.memory import AnonPeak
from forensics.scan.run import ScanOptions, plan_shards, run_scan
from forensics.scan.shard import scan_shard
from forensics_testing.scan_run import ScanRunSpec, build_scan_run

SEQ = 2048
GBS = 128
CONFIGS = [("plain", 1), ("local", 1), ("local", 2), ("ray", 1), ("ray", 2)]


def build(run: Path, tokens: float) -> dict:
    truth_file = run / "truth.json"
    if truth_file.is_file():
        truth = json.loads(truth_file.read_text())
        if truth["spec"]["tokens_target"] == int(tokens):
            return truth
        shutil.rmtree(run)
    iters = max(200, int(tokens / (SEQ * GBS)) - 50)  # the blend must not run out of data
    spec = ScanRunSpec(
        seq_length=SEQ,
        global_batch_size=GBS,
        train_iters=iters,
        clean_docs=4000,
        dirty_docs=400,
        dirty_weight=0.3,
        stretches=(("mojibake", 12, 16), ("spam", 24, 28), ("ngram", 33, 36)),
        vocab_size=8000,
        tokens_target=int(tokens),
    )
    t0 = time.perf_counter()
    truth = build_scan_run(run, spec)
    truth["build_seconds"] = time.perf_counter() - t0
    truth_file.write_text(json.dumps(truth, indent=2))
    return truth


def one(engine: str, workers: int, run: Path, out: Path, iterations: int, shard: int) -> dict:
    """Run one configuration here (called in a fresh process); returns its numbers."""
    config = load_config(run / "forensics.yaml")
    peak = AnonPeak().__enter__()
    t0 = time.perf_counter()
    if engine == "plain":
        rep = open_replayer(config)  # build the indices once, as run_scan does
        for stage in range(len(config.data.data_stages)):
            rep.stage(stage)
        rep.save_cache()
        sums = [scan_shard(config, a, b, out) for a, b in plan_shards(1, iterations, shard)]
    else:
        result = run_scan(
            config,
            out,
            ScanOptions(
                first=1,
                last=iterations,
                engine=engine,
                workers=workers,
                shard_iterations=shard,
                progress=False,
            ),
        )
        sums = result.summaries
    seconds = time.perf_counter() - t0
    peak.__exit__()
    return {
        "engine": engine,
        "workers": workers,
        "seconds": seconds,
        "documents": sum(s.documents for s in sums),
        "tokens": sum(s.tokens for s in sums),
        "document_tokens": sum(s.document_tokens for s in sums),
        "cpu_seconds": sum(s.cpu_seconds for s in sums),
        "driver_mb": peak.mb,
        "worker_mb": max(s.peak_rss_mb for s in sums),
        "worker_pids": len({s.pid for s in sums}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=float, default=1e9, help="size of the generated run")
    parser.add_argument("--iterations", type=int, default=40, help="iterations scanned")
    parser.add_argument("--shard", type=int, default=4, help="iterations per shard")
    parser.add_argument("--run", type=Path, default=Path("/tmp/forensics-bench-scan"))
    parser.add_argument("--only", help=argparse.SUPPRESS)
    args = parser.parse_args()
    run = args.run
    if args.only:
        engine, workers = args.only.split(":")
        out = run.parent / f"{run.name}-out-{engine}-{workers}"
        shutil.rmtree(out, ignore_errors=True)
        print(json.dumps(one(engine, int(workers), run, out, args.iterations, args.shard)))
        return

    from rich.console import Console
    from rich.table import Table

    truth = build(run, args.tokens)

    rep = open_replayer(load_config(run / "forensics.yaml"))
    total = sum(ds.bin_size // ds.dtype.itemsize for ds in rep.datasets.values())
    console = Console(width=160)
    console.print(
        f"run: {total / 1e9:.2f}B tokens on disk ({rep.last_iteration:,} iterations of "
        f"{GBS} x {SEQ}), built in {truth.get('build_seconds', float('nan')):.0f} s; scanning "
        f"iterations 1-{args.iterations} ({args.iterations * GBS * (SEQ + 1) / 1e6:.1f}M training "
        f"tokens) in shards of {args.shard}; {os.cpu_count()} cores"
    )
    rows = []
    for engine, workers in CONFIGS:
        cmd = [
            sys.executable,
            __file__,
            "--run",
            str(run),
            "--iterations",
            str(args.iterations),
            "--shard",
            str(args.shard),
            "--only",
            f"{engine}:{workers}",
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ})
        if done.returncode != 0:
            console.print(f"[red]{engine} {workers}: failed[/]\n{done.stderr[-2000:]}")
            continue
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    plain = next((r for r in rows if r["engine"] == "plain"), None)
    table = Table(title="forensics scan throughput")
    for col in (
        "engine",
        "workers",
        "wall s",
        "docs/s",
        "tokens/s",
        "doc tokens/s",
        "tokens/CPU-s",
        "driver MB",
        "worker MB",
        "vs plain",
    ):
        table.add_column(col, justify="right")
    for r in rows:
        ratio = plain["seconds"] / r["seconds"] if plain else float("nan")
        table.add_row(
            r["engine"],
            str(r["workers"]),
            f"{r['seconds']:.1f}",
            f"{r['documents'] / r['seconds']:,.0f}",
            f"{r['tokens'] / r['seconds']:,.0f}",
            f"{r['document_tokens'] / r['seconds']:,.0f}",
            f"{r['tokens'] / r['cpu_seconds']:,.0f}",
            f"{r['driver_mb']:.0f}",
            f"{r['worker_mb']:.0f}",
            f"{ratio:.2f}x",
        )
    console.print(table)
    load = os.getloadavg()
    console.print(
        f"load average during the runs: {load[0]:.1f} (1 min), {load[2]:.1f} (15 min) on "
        f"{os.cpu_count()} cores; tokens/CPU-s: training tokens per CPU second of the shard "
        "workers (all their threads), the rate that does not depend on the load"
    )


if __name__ == "__main__":
    main()
