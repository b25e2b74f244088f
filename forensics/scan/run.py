"""`forensics scan`: look ahead before the run gets there.

The replay knows the whole run's order, so the data of iterations the run has not reached yet is
already fixed. `run_scan` cuts iterations A..B into shards (about SHARD_TOKENS training tokens
each, or --shard-iterations), runs them on an engine (forensics.scan.shard_runner), and merges the
parts into:

    scan.parquet      one row per iteration: samples, flagged samples per kind and their shares,
                      tokens, documents, the worst documents (merge.iteration_table)
    instances.parquet every training instance the repeated n-gram rule flags (OLMo-core would
                      drop it): iteration, position, sample_index, times, period, token span
    blocklist.json    every flagged document drawn in A..B, per dataset, with kinds and reasons
    skip.json         spike's format: the stretches whose flagged share exceeds --threshold, as
                      iteration ranges, sample ranges, Megatron-LM and Megatron-DeepSpeed flags
    report.html / report.md / scan.png   the flagged share over iterations with the dense
                      stretches marked, and the top offending sources

Resumable: <out>/.scan/run.json records what the parts belong to (config hash, range, shard
size, scorer version); a run finding it continues with the shards that have no done marker. A
directory holding another scan, or foreign files, is refused unless --force; finished outputs are
never overwritten without --force. Memory is flat in the scan length: shards stream through the
engine, and merging reads only per-iteration rows and flagged documents.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from dataloaders.atomic import write_json_atomic
from dataloaders.console import make_console
from dataloaders.run_config import RunConfig, load_config
from forensics.errors import ForensicsError
from forensics.pipeline import module_version
from forensics.pipeline.engines import check_engine
from forensics.replay import open_replayer
from forensics.scan.merge import write_outputs
from forensics.scan.shard import KINDS, ShardSummary, read_done
from forensics.scan.shard_runner import run_engine
from forensics.skip import check_threshold, json_fingerprint

# Training tokens per shard by default. A worker's private memory grows with its shard: about
# 0.15 GB of indices and libraries plus 0.4 GB per million tokens (scripts/bench_scan.py: 0.57 GB
# for 1M-token shards), so 4M tokens (one iteration of 1024 x 4096) is about 1.8 GB per worker.
SHARD_TOKENS = 4_000_000
DEFAULT_THRESHOLD = 0.2  # a stretch is dense when more than a fifth of its samples are flagged
STATE_DIR = ".scan"
OUTPUTS = (
    "scan.parquet",
    "instances.parquet",
    "blocklist.json",
    "blocklist.parquet",
    "skip.json",
    "report.html",
    "report.md",
    "scan.png",
)


@dataclass(frozen=True)
class ScanOptions:
    """Everything `forensics scan` takes besides the config and the output directory."""

    first: int
    last: int
    threshold: float = DEFAULT_THRESHOLD
    engine: str = "local"
    workers: int = 1
    ray_address: str | None = None
    shard_iterations: int | None = None
    force: bool = False
    progress: bool = True


@dataclass
class ScanResult:
    out: Path
    scan: pl.DataFrame
    skip: dict[str, Any]
    shards: int
    resumed: int  # shards found done from an earlier run
    seconds: float
    summaries: list[ShardSummary] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def plan_shards(first: int, last: int, per_shard: int) -> list[tuple[int, int]]:
    """Consecutive inclusive iteration ranges of `per_shard` iterations covering first..last.

    Shards are aligned to multiples of `per_shard` (counted from iteration 1), so two scans of
    overlapping ranges cut the same shards where they overlap."""
    out = []
    a = first
    while a <= last:
        b = min(last, ((a - 1) // per_shard + 1) * per_shard)
        out.append((a, b))
        a = b + 1
    return out


def check_range(first: int, last: int, last_iteration: int) -> None:
    if first < 1:
        raise ForensicsError(f"--from {first}: iterations are 1-indexed")
    if first > last:
        raise ForensicsError(f"--from {first} is after --to {last}")
    if last > last_iteration:
        raise ForensicsError(
            f"--to {last} is beyond the end of training (last iteration {last_iteration})"
        )


def _state(out: Path, identity: dict[str, Any], force: bool) -> Path:
    """The parts directory for this scan; refuses another scan's directory or foreign files."""
    if out.exists() and not out.is_dir():
        raise ForensicsError(f"{out}: exists and is not a directory")
    state = out / STATE_DIR
    marker = state / "run.json"
    if out.is_dir() and any(out.iterdir()):
        if marker.is_file():
            try:
                prior = json.loads(marker.read_text())
            except (OSError, json.JSONDecodeError):
                prior = {}
            if prior != identity:
                if not force:
                    raise ForensicsError(
                        f"{out}: holds another scan (iterations {prior.get('first')}-"
                        f"{prior.get('last')}, config {prior.get('config_hash')}); choose another "
                        "--out, or pass --force to start it over"
                    )
                shutil.rmtree(state / "parts", ignore_errors=True)
        elif not force:
            raise ForensicsError(
                f"{out}: exists and holds files that are not a forensics scan; choose another "
                "--out, or pass --force to write into it (nothing is deleted)"
            )
        done = [name for name in OUTPUTS if (out / name).exists()]
        if done and not force and marker.is_file():
            raise ForensicsError(
                f"{out / done[0]}: already exists (the scan finished); pass --force to write "
                "it again (finished shards are reused)"
            )
    (state / "parts").mkdir(parents=True, exist_ok=True)
    write_json_atomic(marker, identity)
    return state / "parts"


def _progress(enabled: bool, total_iterations: int, done_iterations: int):
    """A rich progress bar over iterations with ETA (a no-op pair when disabled)."""
    if not enabled:
        return None, None
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        TextColumn("[bold]scan[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("iterations"),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=make_console(stderr=True),
        transient=True,
    )
    task = bar.add_task("scan", total=total_iterations, completed=done_iterations)
    return bar, task


def run_scan(config: Any, out: Path, options: ScanOptions) -> ScanResult:
    """The whole command (see module doc). Bad input raises ForensicsError before any work."""
    opts = options
    t0 = time.perf_counter()
    _check_options(opts)
    run_config, replayer = _open_run(config, opts)
    gbs = run_config.training.global_batch_size
    tokens_per_iteration = gbs * (run_config.data.seq_length + 1)
    per_shard = opts.shard_iterations or max(1, SHARD_TOKENS // tokens_per_iteration)
    out = Path(out)
    identity = {
        "first": opts.first,
        "last": opts.last,
        "config_hash": run_config.config_hash(),
        "shard_iterations": per_shard,
        "scorer": module_version("forensics.score"),
        "scan": module_version("forensics.scan"),
    }
    parts = _state(out, identity, opts.force)
    notes: list[str] = []

    # Indices are built once here and cached, so every worker reads them instead of rebuilding.
    with _status(opts.progress, "building the run's indices (once; the workers read them)"):
        for stage in _stages(replayer, opts.first, opts.last):
            replayer.stage(stage)
        replayer.save_cache()
    fingerprint = json_fingerprint(replayer)

    shards = plan_shards(opts.first, opts.last, per_shard)
    summaries: list[ShardSummary] = []
    pending = []
    for a, b in shards:
        done = read_done(parts, a, b)
        if done is None:
            pending.append((a, b))
        else:
            summaries.append(done)
    resumed = len(summaries)
    if resumed:
        notes.append(f"resumed: {resumed} of {len(shards)} shards were done by an earlier run")
    if pending:
        _run_pending(run_config, opts, parts, len(shards), pending, summaries)

    scan, skip = write_outputs(run_config, replayer, out, parts, shards, opts, fingerprint, notes)
    return ScanResult(
        out=out,
        scan=scan,
        skip=skip,
        shards=len(shards),
        resumed=resumed,
        seconds=time.perf_counter() - t0,
        summaries=sorted(summaries, key=lambda s: s.first),
        notes=notes,
    )


def _check_options(opts: ScanOptions) -> None:
    """The options that need no run: a ForensicsError naming the flag."""
    check_threshold(opts.threshold)
    check_engine(opts.engine, opts.workers, None)  # the address once the range is known good
    if opts.shard_iterations is not None and opts.shard_iterations < 1:
        raise ForensicsError(f"--shard-iterations {opts.shard_iterations}: must be at least 1")
    if opts.ray_address and opts.engine != "ray":
        raise ForensicsError("--ray-address needs --engine ray")


def _open_run(config: Any, opts: ScanOptions) -> tuple[Any, Any]:
    """(RunConfig, Replayer) of a Megatron run whose iterations hold --from..--to."""
    run_config, origin = _load(config)
    replayer = open_replayer(run_config)
    if not replayer.token_files:  # the replayer's capability (dataloaders.base.Replayer)
        raise ForensicsError(
            f"{origin}: forensics scan reads Megatron .bin/.idx runs; data.format is "
            f"{run_config.data.format!r}"
        )
    check_range(opts.first, opts.last, replayer.last_iteration)
    if opts.engine == "ray" and opts.ray_address:
        check_engine(opts.engine, opts.workers, opts.ray_address)
    return run_config, replayer


def _run_pending(
    config: Any,
    opts: ScanOptions,
    parts: Path,
    n_shards: int,
    pending: list[tuple[int, int]],
    summaries: list[ShardSummary],
) -> None:
    """Scan the pending shards on the chosen engine under the progress bar, appending their
    summaries; a ForensicsError naming the shards that still failed after retries."""
    total = opts.last - opts.first + 1
    bar, task = _progress(opts.progress, total, sum(s.last - s.first + 1 for s in summaries))
    errors: list[str] = []

    def on_done(summary: ShardSummary) -> None:
        summaries.append(summary)
        if bar is not None:
            bar.advance(task, summary.last - summary.first + 1)

    on_done.note = errors.append  # type: ignore[attr-defined]
    if bar is not None:
        bar.start()
    try:
        failed = run_engine(
            opts.engine, config, pending, parts, opts.workers, on_done, opts.ray_address
        )
    finally:
        if bar is not None:
            bar.stop()
    if failed:
        listed = ", ".join(f"{a}-{b}" for a, b in failed[:5])
        more = f" and {len(failed) - 5} more" if len(failed) > 5 else ""
        why = f" ({errors[0]})" if errors else ""
        raise ForensicsError(
            f"{len(failed)} shard(s) failed after retries: iterations {listed}{more}{why}; "
            f"the {n_shards - len(failed)} finished shards are kept in {parts}: rerun the "
            "same command to scan only the missing ones"
        )


@contextmanager
def _status(enabled: bool, what: str) -> Iterator[None]:
    """A spinner on stderr while a step without its own progress runs."""
    if not enabled:
        yield
        return

    with make_console(stderr=True).status(what):
        yield


def _load(config: Any) -> tuple[Any, str]:
    """(RunConfig, where it came from): a YAML path is loaded, a RunConfig taken as is."""
    if isinstance(config, RunConfig):
        if config.origin:
            return config, config.origin
        return config, str(config.source) if config.source is not None else "--megatron-args"
    return load_config(config), str(Path(config).resolve())


def _stages(replayer: Any, first: int, last: int) -> list[int]:
    """Data stages in force over first..last."""
    import numpy as np

    its = np.arange(first, last + 1, dtype=np.int64)
    return sorted({int(s) for s in np.unique(replayer.schedule.stage_of(its))})


__all__ = ["KINDS", "ScanOptions", "ScanResult", "run_scan"]
