"""Benchmark `forensics triage` on a generated 1,000,000-step log (target: under 10 s).

Generates a per-step run (power law + noise, 0.5% one-step blips, a benign spike, a malignant
step, grad norm, lr) in two formats, Megatron stdout (~290 MB) and CSV, then times each stage:
read_log, triage, and writing events.json/report.md/PNG. Prints a table; wall times on a shared
machine depend on its load (printed first), the `cpu s` column much less.

Usage: .venv/bin/python scripts/bench_triage.py [--steps N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from forensics.triage.analyze import triage
from forensics.triage.readers import read_log
from forensics.triage.report import write_outputs


def make_run(n: int) -> pl.DataFrame:
    rng = np.random.default_rng(0)
    step = np.arange(1, n + 1, dtype=np.int64)
    base = 2.0 + 9.0 * step.astype(float) ** -0.35
    loss = base + rng.normal(0, 1, n) * (0.01 + 0.08 * (base - 2.0) / 9.0)
    blips = rng.choice(np.arange(1000, n - 1000), n // 200, replace=False)
    loss[blips] += 1.0  # per-step microbatch blips (0.5% of steps), counted not alarmed
    t = step - n // 2
    loss += np.where(t >= 0, 1.5 * np.exp(-np.maximum(t, 0) / 5.0), 0.0)  # benign spike
    t = step - int(0.8 * n)
    loss += np.where(t >= 0, 0.5 + 0.5 * np.exp(-np.maximum(t, 0) / 20.0), 0.0)  # malignant
    return pl.DataFrame(
        {
            "step": step,
            "loss": loss,
            "grad_norm": 0.3 + 0.03 * rng.standard_normal(n),
            "lr": 3e-4 * np.minimum(step / 2000, 1.0),
            "consumed_samples": step * 512,
        }
    )


def write_megatron(df: pl.DataFrame, path: Path) -> None:
    """Vectorised rendering of Megatron `training_log` lines (with a launcher prefix)."""
    n = df.height
    lines = df.select(
        pl.format(
            "[default0]: iteration {}/{} | consumed samples: {} | elapsed time per iteration (ms): "
            "1234.5 | learning rate: {} | global batch size:   512 | lm loss: {} | loss scale: "
            "1.0 | grad norm: {} | number of skipped iterations:   0 | number of nan iterations: "
            "  0 |",
            pl.col("step"),
            pl.lit(n),
            pl.col("consumed_samples"),
            pl.col("lr").round_sig_figs(4),
            pl.col("loss").round_sig_figs(7),
            pl.col("grad_norm").round(3),
        ).alias("line")
    )
    lines.write_csv(path, include_header=False, quote_style="never")


def bench(path: Path, fmt: str, out: Path) -> dict[str, float]:
    c0 = time.process_time()
    t0 = time.perf_counter()
    table = read_log(path, fmt)
    t1 = time.perf_counter()
    result = triage(table)
    t2 = time.perf_counter()
    write_outputs(result, out, str(path), fmt)
    t3 = time.perf_counter()
    cpu = time.process_time() - c0
    verdicts = [e.get("verdict") for e in result.events if e["kind"] == "spike"]
    return {
        "rows": table.height,
        "MB": path.stat().st_size / 1e6,
        "read": t1 - t0,
        "triage": t2 - t1,
        "write": t3 - t2,
        "total": t3 - t0,
        "cpu": cpu,
        "found": ", ".join(f"{verdicts.count(v)} {v}" for v in sorted(set(verdicts))),
        "blips": result.summary["curves"]["loss"]["blips"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--keep", type=Path, default=None, help="keep the generated logs here")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench_triage_"))
    work.mkdir(parents=True, exist_ok=True)
    df = make_run(args.steps)
    csv, log = work / "run.csv", work / "run.log"
    df.write_csv(csv)
    write_megatron(df, log)
    rows = [("csv", csv), ("megatron", log)]
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print("| format | rows | MB | read s | triage s | write s | total s | cpu s | spikes | blips |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for fmt, path in rows:
        r = bench(path, fmt, work / f"out-{fmt}")
        print(
            f"| {fmt} | {r['rows']:,} | {r['MB']:.0f} | {r['read']:.2f} | {r['triage']:.2f} | "
            f"{r['write']:.2f} | {r['total']:.2f} | {r['cpu']:.2f} | {r['found']} | {r['blips']} |"
        )
    if args.keep is None:
        for p in sorted(work.rglob("*"), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
        work.rmdir()


if __name__ == "__main__":
    main()
