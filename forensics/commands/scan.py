"""`forensics scan`: score every document of iterations the run has not reached yet."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from dataloaders.console import make_console
from dataloaders.storage import fetched
from forensics.commands.options import ConfigOption, FromCheckpointOption, MegatronArgsOption
from forensics.run_source import resolve_run_config
from forensics.scan.run import STATE_DIR, ScanOptions, run_scan


def scan_command(
    first: Annotated[int, typer.Option("--from", help="First iteration to scan (1-indexed).")],
    last: Annotated[int, typer.Option("--to", help="Last iteration to scan (inclusive).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory.")],
    config: ConfigOption = None,
    megatron_args: MegatronArgsOption = None,
    from_checkpoint: FromCheckpointOption = None,
    threshold: Annotated[
        float,
        typer.Option(
            "--threshold",
            help="Skip an iteration when more than this share of its samples is flagged.",
        ),
    ] = 0.2,
    engine: Annotated[
        str, typer.Option("--engine", help="local (a process pool) or ray (Ray Data).")
    ] = "local",
    ray_address: Annotated[
        str | None,
        typer.Option("--ray-address", help="HOST:PORT of a Ray head (default: start one here)."),
    ] = None,
    workers: Annotated[int, typer.Option("--workers", help="Worker processes.")] = 1,
    shard_iterations: Annotated[
        int | None,
        typer.Option(
            "--shard-iterations",
            help="Iterations per shard (default: about 4M training tokens' worth). Parts and "
            "resumption are per shard; worker memory grows with it.",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Rewrite finished outputs / start another scan over.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress and no summary.")] = False,
) -> None:
    """Replay iterations FROM..TO ahead of training, score every document (encoding garbage,
    template spam, OLMo 2's repeated n-grams per document and per instance), and write
    scan.parquet, a report, a block list and a preemptive skip.json for the dense stretches."""
    run = resolve_run_config(config, megatron_args, from_checkpoint)
    options = ScanOptions(
        first=first,
        last=last,
        threshold=threshold,
        engine=engine,
        workers=workers,
        ray_address=ray_address,
        shard_iterations=shard_iterations,
        force=force,
        progress=not quiet,
    )
    with _first_scan_leaves_nothing(out):
        result = run_scan(run, out, options)
    if not quiet:
        _print_summary(result, first, last, threshold, out)

    here = os.getpid()  # shards run here are in this process's count already
    remote = fetched.total() + sum(
        s.fetched_bytes for s in result.summaries if s.pid != here and s.fetched_bytes
    )
    if remote:
        print(f"object storage: {remote:,} bytes fetched (the driver and the scan's workers)")


@contextmanager
def _first_scan_leaves_nothing(out: Path) -> Iterator[None]:
    """A first scan into a new --out that fails or is interrupted (SIGINT, SIGTERM) before any
    shard is done removes the folder it made: only its resume state (`.scan/`, no finished
    part) would be in it. Once a shard is done, the folder stays: the next run resumes there."""
    existed = out.exists()
    try:
        yield
    except BaseException:
        parts = out / STATE_DIR / "parts"
        done = parts.is_dir() and any(parts.iterdir())
        if not existed and out.is_dir() and not done:
            if all(p.name == STATE_DIR for p in out.iterdir()):
                shutil.rmtree(out, ignore_errors=True)
        raise


def _print_summary(result: Any, first: int, last: int, threshold: float, out: Path) -> None:
    """What the scan found, on stdout: the flagged share, the dense stretches, the notes."""
    from rich.markup import escape

    console = make_console()
    scan = result.scan
    flagged = int(scan["flagged_samples"].sum())
    samples = int(scan["samples"].sum())
    console.print(
        f"scanned iterations {first}-{last} ({result.shards} shards, {result.resumed} resumed) "
        f"in {result.seconds:.1f} s: {flagged:,} of {samples:,} samples flagged"
    )
    for s in result.skip["stretches"]:
        console.print(
            f"  [bold red]dense[/] {s['first']}-{s['last']}: "
            f"{100 * s['flagged_share']:.0f}% flagged "
            + escape(", ".join(f"{k} {100 * v:.0f}%" for k, v in s["kinds"].items()))
        )
    if not result.skip["stretches"]:
        console.print(f"  no stretch above --threshold {threshold:g}")
    for note in result.notes:
        console.print(f"  [dim]note: {escape(note)}[/]")
    console.print(f"scan.parquet, report, blocklist.json and skip.json in {escape(str(out))}/")
