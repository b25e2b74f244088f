"""Benchmark: `forensics spike` on a generated run at production batch shape.

`--shape bench` (default): global batch 256, sequence 2048, a 300-iteration window: 76,800
samples, 157M tokens replayed before the spike, plus a baseline window of the same size. The run
(about 110k documents from text on this machine, recombined past what the machine has; a mixed
dirty crawl batch entering 60 iterations before the spike) is built once under --work and
reused. Rows: a cold run (empty output directory), then three warm reruns into the same
directory: the same options, another threshold, and `--culprit` naming the cold run's culprit
(what the stage cache saves; goal: each under 5 s).

`--shape production`: global batch 1024, sequence 4096, the same 300-iteration window: 307,200
samples, 1.26B tokens (plus the baseline). The same documents (the run is derived from the bench
run: its data, tokenizer and manifests, with the production config and log). `--window N`
replays N iterations instead, to compare peak memory at two window sizes. Prints each stage's
wall time and the peak resident memory (VmHWM) of this process (the driver) and of its worker
processes (the local engine's process pool, or Ray's workers), sampled from /proc.

`--shape distinct` (global batch 1024 x sequence 4096, window 300: 1.26B tokens) and `--shape
llama3` (4096 x 4096: 1.2M samples, 5B tokens): runs whose documents are mostly distinct, as in
a real window (scripts/bench_corpus.py derives them from the bench run's documents in seconds).
`--scale N` divides the global batch (10: a tenth of the shape). Prints how many distinct
documents the window holds, each stage's time and the process tree's peak in it, the tree's
peak (driver and workers: bench_memory.PeakMemory) and the verdict against the goals (3 min for
distinct, 6 min for llama3, 4 GiB). `--windows 75,300,1200` runs each window in a fresh process
over one run built for the longest and prints the peak per window. `--census-only` runs the
first pass alone: the replay in parts and the distinct documents, nothing decoded.

`--engine local --workers 2` / `--engine ray --workers 2` replay, decode and score in parts
(forensics/spike/census.py, forensics/spike/parts.py) instead of in this process. Goal for the
bench shape: the cold run under 120 s on 2 cores, its embed stage under 20 s, with the culprit
unchanged.

    .venv/bin/python scripts/bench_spike.py [--work /tmp/forensics-bench] [--embed-cap 3000]
                                            [--engine local|ray] [--workers N]
                                            [--shape bench|production|distinct|llama3]
                                            [--window N | --windows 75,300,1200] [--scale N]
                                            [--census-only]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from dataclasses import asdict, replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench_memory import PeakMemory, watch_stages  # noqa: E402

from forensics.pipeline import module_version  # noqa: E402
from forensics.spike import SpikeOptions, run_spike  # noqa: E402
from forensics_testing.demo.build import DemoSpec, build_run, config_dict, megatron_log_lines  # noqa: E402

SPEC = DemoSpec(
    name="bench",
    seed=4242,
    seq_length=2048,
    global_batch_size=256,
    train_iters=3000,
    switch_iteration=1441,
    spike_iteration=1500,
    checkpoint_interval=100,
    log_tail=40,
    dirty_kind="mixed",
    docs_prose=40000,
    docs_code=30000,
    docs_per_crawl=6000,
    crawls_v1=4,
    crawls_v2=3,
    vocab_size=16000,
)
WINDOW = 300
PRODUCTION = replace(SPEC, name="bench-production", seq_length=4096, global_batch_size=1024)
# Distinct-document shapes (scripts/bench_corpus.py): global batch x sequence 4096.
DISTINCT_BATCH = {"distinct": 1024, "llama3": 4096}


def distinct_spec(shape: str, window: int, scale: int) -> DemoSpec:
    """The run of a distinct-document shape whose spike ends a `window`-iteration window with
    as long a baseline before it (clamped at iteration 1): the spike at 2 x window, the dirty
    crawl batch entering 60 iterations before it, training 40 iterations past it. `scale`
    divides the global batch (1: the full shape)."""
    spike = 2 * window
    return replace(
        SPEC,
        name=f"bench-{shape}-{scale}",
        seq_length=4096,
        global_batch_size=max(1, DISTINCT_BATCH[shape] // scale),
        spike_iteration=spike,
        switch_iteration=spike - 59,
        train_iters=spike + SPEC.log_tail,
    )


def ensure_run(work: Path, spec: DemoSpec = SPEC, *, distinct: bool = False) -> Path:
    """Build the benchmark run once (rebuilt when the spec or the builder's code changes).
    The production shape is derived from the bench run (same documents); a `distinct` shape
    from its documents recombined so that the run draws each about once (bench_corpus)."""
    run = work / ("run" if spec == SPEC else f"run-{spec.name}")
    truth = run / "truth.json"
    if truth.is_file():
        built = json.loads(truth.read_text())
        same_spec = built["spec"] == json.loads(json.dumps(asdict(spec)))
        if same_spec and built.get("builder") == module_version("forensics_testing.demo"):
            return run
    if run.exists():
        shutil.rmtree(run)
    if distinct:
        from bench_corpus import build_distinct_run

        build_distinct_run(ensure_run(work, SPEC), spec, run)
        return run
    if spec != SPEC:
        return derive_run(ensure_run(work, SPEC), spec, run)
    t0 = time.perf_counter()
    info = build_run(run, spec)
    print(
        f"built the run in {time.perf_counter() - t0:.0f} s: "
        f"{sum(info['documents'].values()):,} documents, {sum(info['tokens'].values()):,} tokens"
    )
    return run


def derive_run(base: Path, spec: DemoSpec, run: Path) -> Path:
    """`base`'s documents (data, manifests, tokenizer: they depend on the seed and the document
    counts, not on the batch shape) under `spec`'s config, log and checkpoints, written by the
    demo builder's own functions."""
    import yaml

    shutil.copytree(base / "data", run / "data", copy_function=os.link)
    shutil.copy2(base / "tokenizer.json", run / "tokenizer.json")
    for it in range(spec.checkpoint_interval, spec.spike_iteration + spec.log_tail + 1,
                    spec.checkpoint_interval):  # fmt: skip
        (run / "checkpoints" / f"iter_{it:07d}").mkdir(parents=True, exist_ok=True)
    (run / "logs").mkdir(exist_ok=True)
    (run / "logs" / "train.log").write_text("\n".join(megatron_log_lines(spec)) + "\n")
    (run / "forensics.yaml").write_text(yaml.safe_dump(config_dict(spec), sort_keys=False))
    truth = json.loads((base / "truth.json").read_text())
    truth["spec"] = asdict(spec)
    (run / "truth.json").write_text(json.dumps(truth, indent=2))
    return run


def timed(config: Path, out: Path, opts: SpikeOptions) -> tuple[object, float, float]:
    """The run's result, wall seconds, and CPU seconds (this process's threads and the child
    processes that exited meanwhile: less sensitive than wall time to a loaded machine)."""
    import resource

    def cpu() -> float:
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return time.process_time() + kids.ru_utime + kids.ru_stime

    t0, c0 = time.perf_counter(), cpu()
    result = run_spike(config, out, opts)
    return result, time.perf_counter() - t0, cpu() - c0


def print_stages(
    runs: list[tuple[str, object, float, float]],
    gib: dict[str, float] | None = None,
    private: dict[str, float] | None = None,
    driver: dict[str, float] | None = None,
) -> None:
    """One column per run: each stage's seconds, and whether a rerun read it from the cache;
    the total wall and CPU seconds; `gib` / `private`: the process tree's peak resident /
    private memory in each stage of the first."""
    head = "".join(f" {name:>14}" for name, *_ in runs)
    print(f"{'stage':<10}{head}{'  tree GiB' if gib else ''}{'  private' if private else ''}"
          f"{'  driver private' if driver else ''}")  # fmt: skip
    stages = list(dict.fromkeys(s for _, result, *_ in runs for s in result.timings))
    for stage in stages:
        cells = []
        for _, result, *_ in runs:
            hit = result.cached.get(stage, result.cached.get(f"{stage}-scope"))
            mark = "" if hit is None or result is runs[0][1] else (" c" if hit else " -")
            cells.append(f" {result.timings.get(stage, 0.0):12.1f}{mark:2}")
        peak = f" {gib[stage]:9.2f}" if gib and stage in gib else ""
        peak += f" {private[stage]:8.2f}" if private and stage in private else ""
        peak += f" {driver[stage]:8.2f}" if driver and stage in driver else ""
        print(f"{stage:<10}{''.join(cells)}{peak}")
    print(f"{'total':<10}{''.join(f' {total:12.1f}  ' for _, _, total, _ in runs)}")
    print(f"{'CPU s':<10}{''.join(f' {cpu:12.1f}  ' for *_, cpu in runs)}")
    print("(c: read from the stage cache; -: computed)")


def warm_reruns(
    config: Path, out: Path, opts: SpikeOptions, cold
) -> list[tuple[str, object, float, float]]:
    """The reruns a user makes after reading the report: the same command, another threshold,
    and --culprit naming the cluster the cold run blamed."""
    runs = [("warm same", *timed(config, out, replace(opts, force=True)))]
    runs.append(("warm thr 0.05", *timed(config, out, replace(opts, threshold=0.05, force=True))))
    top = cold.report.culprit
    if top is not None:
        pick = replace(opts, culprits=(str(top["id"]),), force=True)
        runs.append(("warm --culprit", *timed(config, out, pick)))
    return runs


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/forensics-bench"))
    parser.add_argument("--embed-cap", type=int, default=None, help="default: the pipeline's")
    parser.add_argument("--engine", default="local", help="decode+score engine: local or ray")
    parser.add_argument("--workers", type=int, default=1, help="engine workers (1: in-process)")
    parser.add_argument("--shape", choices=("bench", "production", *DISTINCT_BATCH),
                        default="bench")  # fmt: skip
    parser.add_argument("--window", type=int, default=WINDOW, help="iterations replayed")
    parser.add_argument(
        "--windows",
        default=None,
        help="e.g. 75,300,1200: one fresh process per window, peak RSS each",
    )
    parser.add_argument(
        "--scale",
        type=int,
        default=1,
        help="distinct shapes: divide the global batch by this (10: 1/10)",
    )
    parser.add_argument(
        "--census-only",
        action="store_true",
        help="the census alone: replay in parts + distinct documents, no decode",
    )
    parser.add_argument("--corpus-window", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--summary-json", type=Path, default=None, help=argparse.SUPPRESS)
    return parser.parse_args()


def run_spec(args: argparse.Namespace) -> tuple[DemoSpec, bool]:
    """The run's spec, and whether it is a distinct-document run."""
    if args.shape in DISTINCT_BATCH:
        return distinct_spec(args.shape, args.corpus_window or args.window, args.scale), True
    return (SPEC if args.shape == "bench" else PRODUCTION), False


def main() -> None:
    args = parse_args()
    if args.windows:
        return compare_windows(args)
    spec, distinct = run_spec(args)
    run = ensure_run(args.work, spec, distinct=distinct)
    out = args.work / f"spike-{spec.name}-{args.engine}-{args.workers}-{args.window}"
    if out.exists():
        shutil.rmtree(out)  # the benchmark's own output: a cold run starts empty
    opts = SpikeOptions(step=spec.spike_iteration, window=args.window, embed_cap=args.embed_cap,
                        engine=args.engine, workers=args.workers, progress=False)  # fmt: skip
    config = run / "forensics.yaml"
    load_before = os.getloadavg()[0]
    if args.census_only:
        return census_bench(args, spec, config, out, opts)
    with PeakMemory() as memory, watch_stages(memory):
        cold, cold_total, cold_cpu = timed(config, out, opts)
    runs = [("cold", cold, cold_total, cold_cpu)]
    if args.shape == "bench":
        runs += warm_reruns(config, out, opts, cold)
    samples = args.window * spec.global_batch_size
    tokens = samples * (spec.seq_length + 1)
    census = census_counts(out)
    print(
        f"\nforensics spike ({spec.name}): window {cold.window[0]}-{cold.window[1]} "
        f"({samples:,} samples, {tokens / 1e6:,.0f}M tokens) + baseline "
        f"{cold.baseline[0]}-{cold.baseline[1]}; distinct documents: {census['window_docs']:,} in "
        f"the window, {census['both']:,} in window + baseline; {census['rows']:,} "
        f"sample-document rows; engine {args.engine} x {args.workers}; {os.cpu_count()} CPUs, "
        f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
    )
    print_stages(runs, {k: kb / 2**20 for k, kb in memory.by_stage.items()},
                 {k: kb / 2**20 for k, kb in memory.anon_by_stage.items()},
                 {k: kb / 2**20 for k, kb in memory.driver_anon_by_stage.items()})  # fmt: skip
    peak = memory.summary()
    peak["tree"] = max(peak["tree"], peak["driver"])
    print(
        f"peak resident memory, cold run: process tree {peak['tree']:.2f} GiB "
        f"({peak['tree_anon']:.2f} GiB private; sampled every 0.5 s); driver {peak['driver']:.2f} "
        f"GiB (VmHWM); {peak['workers']} worker processes, largest {peak['worker_max']:.2f} GiB"
    )
    report_goals(args, spec, cold, runs, peak)
    if args.summary_json:
        summary = {**census, "window": args.window, "seconds": cold_total, "peak": peak,
                   "timings": cold.timings, "stage_gib": memory.by_stage,
                   "stage_private": memory.anon_by_stage,
                   "driver_private": memory.driver_anon_by_stage}  # fmt: skip
        args.summary_json.write_text(json.dumps(summary))


def census_bench(
    args: argparse.Namespace, spec: DemoSpec, config: Path, out: Path, opts: SpikeOptions
) -> None:
    """`--census-only`: the census's stages, its counts and the process tree's peak."""
    from bench_corpus import census_only

    t0 = time.perf_counter()
    with PeakMemory() as memory, watch_stages(memory):
        timings = census_only(config, out, opts)
    seconds = time.perf_counter() - t0
    census, peak = census_counts(out), memory.summary()
    peak["tree"] = max(peak["tree"], peak["driver"])
    stages = ", ".join(f"{k} {v:.1f} s ({memory.by_stage.get(k, 0) / 2**20:.2f} GiB)"
                       for k, v in timings.items())  # fmt: skip
    print(
        f"census ({spec.name}, window {args.window} x {spec.global_batch_size}: "
        f"{args.window * spec.global_batch_size:,} samples; engine {args.engine} x "
        f"{args.workers}): {seconds:.1f} s wall; {stages}; distinct documents: "
        f"{census['window_docs']:,} in the window, {census['both']:,} in window + baseline; "
        f"{census['rows']:,} sample-document rows; process tree peak {peak['tree']:.2f} GiB "
        f"({peak['tree_anon']:.2f} GiB private); load average {os.getloadavg()[0]:.1f}"
    )
    if args.summary_json:
        summary = {**census, "window": args.window, "seconds": seconds, "peak": peak,
                   "timings": timings, "stage_gib": memory.by_stage}  # fmt: skip
        args.summary_json.write_text(json.dumps(summary))


def census_counts(out: Path) -> dict[str, int]:
    """Distinct documents of the window and of window + baseline, and replay rows, from the
    run's stage cache."""
    import polars as pl

    cache = out / ".cache"
    sides = pl.concat([pl.read_parquet(f) for f in cache.glob("sides-*.parquet")])
    window = sides.filter(pl.col("side") == "window").select("dataset", "doc_id").unique()
    replay = [f for f in cache.glob("replay-*") if f.is_dir() or f.suffix == ".parquet"]
    rows = pl.scan_parquet([p / "*.parquet" if p.is_dir() else p for p in replay]).select(
        pl.len()).collect().item()  # fmt: skip
    both = sides.select("dataset", "doc_id").unique().height
    return {"window_docs": window.height, "both": both, "rows": int(rows)}


def compare_windows(args: argparse.Namespace) -> None:
    """Each window in a fresh process (its own peak) over one run built for the longest."""
    import subprocess
    import sys

    windows = [int(w) for w in args.windows.split(",")]
    spec, distinct = run_spec(replace_args(args, window=max(windows)))
    ensure_run(args.work, spec, distinct=distinct)
    rows = []
    for w in windows:
        summary = args.work / f"windows-{w}.json"
        cmd = [sys.executable, __file__, "--work", str(args.work), "--shape", args.shape,
               "--scale", str(args.scale), "--window", str(w), "--engine", args.engine,
               "--workers", str(args.workers), "--summary-json", str(summary),
               "--corpus-window", str(max(windows))]  # fmt: skip
        if args.embed_cap is not None:
            cmd += ["--embed-cap", str(args.embed_cap)]
        if args.census_only:
            cmd.append("--census-only")
        subprocess.run(cmd, check=True)
        rows.append(json.loads(summary.read_text()))
    print(f"\npeak RSS per window ({spec.name}, engine {args.engine} x {args.workers}):")
    print(f"{'window':>7} {'samples':>10} {'distinct docs':>14} {'rows':>11} {'wall s':>8} "
          f"{'tree GiB':>9} {'private':>8} {'driver':>7}")  # fmt: skip
    for r in rows:
        p = r["peak"]
        print(f"{r['window']:>7} {r['window'] * spec.global_batch_size:>10,} {r['both']:>14,} "
              f"{r['rows']:>11,} {r['seconds']:>8.1f} {p['tree']:>9.2f} {p['tree_anon']:>8.2f} "
              f"{p['driver']:>7.2f}")  # fmt: skip
    for r in rows:
        stages = ", ".join(f"{k} {kb / 2**20:.2f}" for k, kb in r["stage_gib"].items())
        print(f"  window {r['window']}, tree GiB at its peak in each stage: {stages}")
        for label, key in (("private", "stage_private"), ("driver private", "driver_private")):
            cells = ", ".join(f"{k} {kb / 2**20:.2f}" for k, kb in r.get(key, {}).items())
            print(f"  window {r['window']}, {label} GiB at its peak in each stage: {cells}")


def replace_args(args: argparse.Namespace, **changes: object) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), **changes})


def report_goals(
    args: argparse.Namespace,
    spec: DemoSpec,
    cold,
    runs: list[tuple[str, object, float, float]],
    peak: dict[str, float],
) -> None:
    top = cold.report.culprit
    skip = cold.skip
    print(
        f"\nculprit: {top['facet']}={top['key']}" if top else "\nculprit: none",
        f"| skip {skip.iterations} | clean samples skipped "
        f"{skip.collateral['clean_samples_skipped']:,}, culprit samples missed "
        f"{skip.collateral['culprit_samples_missed']:,} | ahead "
        f"{100 * skip.ahead['share_of_remaining_samples']:.1f}% of remaining samples",
    )
    if args.shape in DISTINCT_BATCH:
        minutes = {"distinct": 3, "llama3": 6}[args.shape]
        scale = "" if args.scale == 1 else f" (at 1/{args.scale} of the shape: not the goal's)"
        wall, gib = runs[0][2], peak["tree"]
        print(
            f"goals (2 cores){scale}: cold run at most {minutes} min: "
            f"{'met' if wall <= 60 * minutes else 'NOT met'} ({wall / 60:.1f} min); process "
            f"tree at most 4 GiB: {'met' if gib <= 4 else 'NOT met'} ({gib:.2f} GiB)"
        )
    if args.shape != "bench":
        return
    embed = cold.timings.get("embed", 0.0)
    slowest = max((total for _, _, total, _ in runs[1:]), default=0.0)
    print(
        f"goals (2 cores): cold run under 120 s: {'met' if runs[0][2] < 120 else 'NOT met'}; "
        f"embed stage under 20 s: {'met' if embed < 20 else 'NOT met'}; every warm rerun "
        f"under 5 s: {'met' if slowest < 5 else 'NOT met'} (load average "
        f"{os.getloadavg()[0]:.1f}: numbers on a shared machine overstate a quiet one's)"
    )


if __name__ == "__main__":
    main()
