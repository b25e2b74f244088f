"""The replay of the window and the baseline in parts by iteration range, streamed to one file.

The replay table says which document segments every sample of both sides holds (index
arithmetic, no decoding). It is cut into parts of about PART_SAMPLES samples, each replayed and
written as its own Parquet file, in this process or on the engine the user picks (`--engine
local|ray --workers N`: forensics.pipeline.engines, each worker opening the run's replayer
itself); then the parts are concatenated into `replay-<key>.parquet` by polars' streaming sink.
No step holds more than one part, plus the sink's buffers. An engine's worker reads the loader's
index arrays from the replayer's index cache, which the driver fills first (it replays the first
part of each data stage the sides touch, then saves the cache), so workers do not rebuild the
shuffles.

Families whose replay of a range costs a pass from the start of the data (no `token_files`)
replay each side as one part: cutting them would repeat that pass per part.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from dataloaders.atomic import atomic_path, write_parquet_atomic
from dataloaders.mapped_pages import releasing_pages
from dataloaders.progress import progress_bar
from forensics.errors import ForensicsError
from forensics.pipeline.engines import map_parts
from forensics.replay import cached_replayer

PART_SAMPLES = 32_768  # samples per part: ~134M tokens at sequence 4096, ~25 MB of rows
Item = dict[str, Any]


def iterations_per_part(replayer: Any, first: int, last: int) -> int:
    """How many iterations of first..last make one part (the widest batch decides)."""
    if not replayer.token_files:
        return last - first + 1
    spans = replayer.iteration_samples(first, last)
    widest = int((spans["end_sample"] - spans["first_sample"]).max() or 1)
    return max(1, PART_SAMPLES // max(widest, 1))


def plan_census(replayer: Any, sides: dict[str, tuple[int, int]], folder: Path) -> list[Item]:
    """One item per part: its side, iteration range and the Parquet file it writes, in the
    order of the table (the sides in the order given, iterations ascending)."""
    items: list[Item] = []
    for side, (first, last) in sides.items():
        per = iterations_per_part(replayer, first, last)
        for lo in range(first, last + 1, per):
            part = len(items)
            items.append({"part": part, "side": side, "first": lo, "last": min(last, lo + per - 1),
                          "out": str(folder / f"part-{part:05d}.parquet")})  # fmt: skip
    return items


@releasing_pages
def replay_part(replayer: Any, item: Item) -> Item:
    """Replay one part into its file (kept when an earlier attempt wrote it); a few numbers
    come back."""
    out = Path(item["out"])
    if not out.is_file():
        table = replayer.replay(int(item["first"]), int(item["last"]), text=False, progress=False)
        write_parquet_atomic(table.with_columns(pl.lit(item["side"]).alias("side")), out)
    return {"part": int(item["part"]), "iterations": int(item["last"]) - int(item["first"]) + 1}


def replay_part_task(config: Any, item: Item) -> Item:
    """An engine's worker: `replay_part` with the replayer this process opened for `config`."""
    return replay_part(cached_replayer(config), item)


def warm_parts(replayer: Any, items: list[Item]) -> list[Item]:
    """The first part of each data stage the items touch (its indices built by replaying it
    here, then kept by `save_cache` for the engine's workers)."""
    seen: set[int] = set()
    first_of_stage: list[Item] = []
    for item in items:
        spans = replayer.iteration_samples(int(item["first"]), int(item["last"]))
        stages = set(spans["stage"].unique().to_list()) - seen
        if stages:
            seen |= stages
            first_of_stage.append(item)
    return first_of_stage


def run_census(
    replayer: Any,
    config: Any,
    items: list[Item],
    engine: str = "local",
    workers: int = 1,
    address: str | None = None,
    progress: bool = False,
) -> None:
    """Every part written: in this process (`local` x 1), else the first part of each data stage
    here and the others on the engine. A ForensicsError names the parts that failed for good."""
    total = sum(int(i["last"]) - int(i["first"]) + 1 for i in items)
    label = "census" if workers == 1 else f"census ({engine}, {workers} workers)"
    with progress_bar(progress, total, label) as advance:

        def done(result: Item) -> None:
            advance(int(result["iterations"]))

        here = items if engine == "local" and workers == 1 else warm_parts(replayer, items)
        for item in here:
            done(replay_part(replayer, item))
        replayer.save_cache()
        rest = [i for i in items if i not in here]
        task: Callable[[Item], Item] = functools.partial(replay_part_task, config)
        failed = map_parts(engine, task, rest, workers, done, address) if rest else []
    if failed:
        names = ", ".join(str(i["part"]) for i in failed[:10])
        raise ForensicsError(
            f"{len(failed)} of {len(items)} replay parts failed for good (parts {names}); "
            "rerun the same command to retry them"
        )


def merge_census(items: list[Item], path: Path) -> None:
    """The parts, in order, into one Parquet file at `path` (atomically) by polars' streaming
    sink: no part is held whole beside another. Columns a part lacks are null, as
    `pl.concat(how="diagonal_relaxed")` gives."""
    scans = [pl.scan_parquet(i["out"]) for i in items]
    with atomic_path(path) as tmp:
        pl.concat(scans, how="diagonal_relaxed").sink_parquet(tmp)


def census_file(
    replayer: Any,
    config: Any,
    sides: dict[str, tuple[int, int]],
    path: Path,
    *,
    engine: str = "local",
    workers: int = 1,
    address: str | None = None,
    progress: bool = False,
) -> Path:
    """Write the replay table of `sides` (with its `side` column) to `path`: the parts in a
    folder beside it, then merged and removed. Parts an interrupted run wrote are kept."""
    folder = path.with_name(path.name.removesuffix(".parquet") + ".parts")
    folder.mkdir(parents=True, exist_ok=True)
    items = plan_census(replayer, sides, folder)
    run_census(replayer, config, items, engine, workers, address, progress)
    merge_census(items, path)
    shutil.rmtree(folder, ignore_errors=True)
    return path
