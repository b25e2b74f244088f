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

`--engine local --workers 2` / `--engine ray --workers 2` decode and score in parts
(forensics/spike/parts.py) instead of in this process. Goal for the bench shape: the cold run
under 120 s on 2 cores, its embed stage under 20 s, with the culprit unchanged.

    .venv/bin/python scripts/bench_spike.py [--work /tmp/forensics-bench] [--embed-cap 3000]
                                            [--engine local|ray] [--workers N]
                                            [--shape bench|production] [--window N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

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


def ensure_run(work: Path, spec: DemoSpec = SPEC) -> Path:
    """Build the benchmark run once (rebuilt when the spec or the builder's code changes).
    The production shape is derived from the bench run (same documents)."""
    run = work / ("run" if spec == SPEC else f"run-{spec.name}")
    truth = run / "truth.json"
    if truth.is_file():
        built = json.loads(truth.read_text())
        same_spec = built["spec"] == json.loads(json.dumps(asdict(spec)))
        if same_spec and built.get("builder") == module_version("forensics_testing.demo"):
            return run
    if run.exists():
        shutil.rmtree(run)
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


class PeakMemory:
    """Peak resident memory (VmHWM, kB) of this process and of every process under it, sampled
    from /proc every `every` seconds while running (a worker's peak is kept after it exits)."""

    def __init__(self, every: float = 0.5) -> None:
        self.every = every
        self.peaks: dict[int, tuple[int, str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakMemory:
        try:  # start this process's peak afresh (not the run build's): Linux clear_refs
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:
            pass
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self._sample()

    def _sample(self) -> None:
        parent: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                    parent[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
        me = os.getpid()
        for pid in parent:
            up, hops = pid, 0
            while up not in (me, 0, 1) and hops < 32:
                up, hops = parent.get(up, 0), hops + 1
            if up != me:
                continue
            try:
                status = Path(f"/proc/{pid}/status").read_text()
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            hwm = next((int(x.split()[1]) for x in status.splitlines() if x.startswith("VmHWM")), 0)
            # An exiting process reads an empty cmdline: keep the last name it ran under (the
            # pool's workers all exit together at the end of the stage, and were lost as
            # unnamed; a child just forked reads its parent's name until it execs).
            seen, named = self.peaks.get(pid, (0, ""))
            self.peaks[pid] = (max(hwm, seen), cmd[:200] or named)

    def summary(self) -> dict[str, float]:
        """GiB: the driver, the largest worker, and all workers together (peaks added: an
        upper bound on what they held at once); and the largest child process that has exited
        (the kernel's count: it misses no worker the sampler could not see)."""
        workers = [kb for pid, (kb, cmd) in self.peaks.items()
                   if pid != os.getpid() and is_worker(cmd)]  # fmt: skip
        import resource

        children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # kB, Linux
        return {
            "children_max": children / 2**20,
            "driver": self.peaks.get(os.getpid(), (0, ""))[0] / 2**20,
            "worker_max": max(workers, default=0) / 2**20,
            "workers_sum": sum(workers) / 2**20,
            "workers": len(workers),
        }


def is_worker(cmd: str) -> bool:
    """A decode/score worker: Ray's task workers, or the local engine's spawned pool."""
    return cmd.startswith("ray::") or "default_worker.py" in cmd or "multiprocessing.spawn" in cmd


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


def print_stages(runs: list[tuple[str, object, float, float]]) -> None:
    """One column per run: each stage's seconds, and whether a rerun read it from the cache;
    the total wall and CPU seconds."""
    head = "".join(f" {name:>14}" for name, *_ in runs)
    print(f"{'stage':<10}{head}")
    stages = list(dict.fromkeys(s for _, result, *_ in runs for s in result.timings))
    for stage in stages:
        cells = []
        for _, result, *_ in runs:
            hit = result.cached.get(stage, result.cached.get(f"{stage}-scope"))
            mark = "" if hit is None or result is runs[0][1] else (" c" if hit else " -")
            cells.append(f" {result.timings.get(stage, 0.0):12.1f}{mark:2}")
        print(f"{stage:<10}{''.join(cells)}")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/forensics-bench"))
    parser.add_argument("--embed-cap", type=int, default=None, help="default: the pipeline's")
    parser.add_argument("--engine", default="local", help="decode+score engine: local or ray")
    parser.add_argument("--workers", type=int, default=1, help="engine workers (1: in-process)")
    parser.add_argument("--shape", choices=("bench", "production"), default="bench")
    parser.add_argument("--window", type=int, default=WINDOW, help="iterations replayed")
    args = parser.parse_args()
    spec = SPEC if args.shape == "bench" else PRODUCTION
    run = ensure_run(args.work, spec)
    out = args.work / f"spike-{args.shape}-{args.engine}-{args.workers}-{args.window}"
    if out.exists():
        shutil.rmtree(out)  # the benchmark's own output: a cold run starts empty
    opts = SpikeOptions(step=spec.spike_iteration, window=args.window, embed_cap=args.embed_cap,
                        engine=args.engine, workers=args.workers, progress=False)  # fmt: skip
    config = run / "forensics.yaml"
    load_before = os.getloadavg()[0]
    with PeakMemory() as memory:
        cold, cold_total, cold_cpu = timed(config, out, opts)
    runs = [("cold", cold, cold_total, cold_cpu)]
    if args.shape == "bench":
        runs += warm_reruns(config, out, opts, cold)
    samples = args.window * spec.global_batch_size
    tokens = samples * (spec.seq_length + 1)
    docs = cold.report.scores.height if cold.report.scores is not None else 0
    print(
        f"\nforensics spike ({args.shape}): window {cold.window[0]}-{cold.window[1]} "
        f"({samples:,} samples, {tokens / 1e6:,.0f}M tokens) + baseline "
        f"{cold.baseline[0]}-{cold.baseline[1]}; {docs:,} window+baseline document rows; "
        f"engine {args.engine} x {args.workers}; {os.cpu_count()} CPUs, load average "
        f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
    )
    print_stages(runs)
    peak = memory.summary()
    print(
        f"peak resident memory, cold run: driver {peak['driver']:.2f} GiB; "
        f"{peak['workers']} worker processes, largest {peak['worker_max']:.2f} GiB, "
        f"all together at most {peak['workers_sum']:.2f} GiB (sampled); largest child process "
        f"that exited {peak['children_max']:.2f} GiB (getrusage)"
    )
    report_goals(args, cold, runs)


def report_goals(
    args: argparse.Namespace, cold, runs: list[tuple[str, object, float, float]]
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
