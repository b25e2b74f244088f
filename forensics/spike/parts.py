"""Decode and score a large window in parts, on a process pool or a Ray cluster
(`spike --engine local|ray --workers N`), with the same result as one process.

Each part (PART_DOCUMENTS documents, by key) is one task: the worker opens the run's replayer
itself (reading the `.bin/.idx` or shards where it runs), decodes its documents, scores them per
document (forensics.score.batches.score_batch) and writes one Parquet part; only counts come
back. The driver then reads the parts in order and computes the one cross-document signal (the
template clusters, from each document's signatures): `combine` gives the table `score_table`
would have given. Parts already written are kept, so a rerun after a failure redoes only the
missing ones; a part that fails for good stops the run with its number (never a partial window).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import polars as pl

from dataloaders.atomic import write_parquet_atomic
from dataloaders.progress import progress_bar
from forensics.errors import ForensicsError
from forensics.pipeline.engines import map_parts
from forensics.replay import cached_replayer
from forensics.score.batches import BATCH_COLUMNS, BatchScores, combine, score_batch
from forensics.score.table import OUTPUT_COLUMNS, RULE_COLUMNS

PART_DOCUMENTS = 2_000  # documents per task: a few seconds of work, ~10 MB of text


def score_part(config: Any, item: dict[str, Any], replayer: Any = None) -> dict[str, Any]:
    """Worker: decode and score one part's documents into `item["out"]` (kept if present);
    `replayer`: the run's, when the part runs in the driver."""
    out = Path(item["out"])
    if not out.is_file():
        keys = pl.read_parquet(item["keys"])
        docs = (replayer or cached_replayer(config)).documents(keys, progress=False)
        scores = score_batch(docs["text"]).to_frame()
        write_parquet_atomic(pl.concat([docs, scores], how="horizontal"), out)
    return {"part": int(item["part"]), "documents": int(item["documents"])}


def plan_parts(distinct: pl.DataFrame, folder: Path) -> list[dict[str, Any]]:
    """One item per PART_DOCUMENTS documents, its keys written to `folder` for the worker."""
    folder.mkdir(parents=True, exist_ok=True)
    items = []
    for part, start in enumerate(range(0, distinct.height, PART_DOCUMENTS)):
        keys = distinct.slice(start, PART_DOCUMENTS)
        keys_file = folder / f"keys-{part:05d}.parquet"
        if not keys_file.is_file():
            write_parquet_atomic(keys, keys_file)
        out = folder / f"part-{part:05d}.parquet"
        items.append({"part": part, "keys": str(keys_file), "out": str(out),
                      "documents": keys.height})  # fmt: skip
    return items


def keys_digest(keys: pl.DataFrame) -> str:
    """A short stable name for a set of (dataset, doc_id) rows, in their order."""
    import hashlib

    digest = hashlib.sha256()
    digest.update("\n".join(keys["dataset"].cast(pl.Utf8).to_list()).encode())
    digest.update(keys["doc_id"].cast(pl.Int64).to_numpy().tobytes())
    return digest.hexdigest()[:16]


def plan_named_parts(docs: pl.DataFrame, folder: Path) -> list[dict[str, Any]]:
    """`plan_parts` for a set that grows between passes: each part is named by its documents'
    digest, so a part scored by an earlier pass (or an earlier run) is read back, never
    mistaken for another set's."""
    folder.mkdir(parents=True, exist_ok=True)
    items = []
    for start in range(0, docs.height, PART_DOCUMENTS):
        keys = docs.slice(start, PART_DOCUMENTS).select("dataset", "doc_id")
        name = keys_digest(keys)
        keys_file = folder / f"keys-{name}.parquet"
        if not keys_file.is_file():
            write_parquet_atomic(keys, keys_file)
        out = str(folder / f"part-{name}.parquet")
        part = start // PART_DOCUMENTS
        items.append({"part": part, "keys": str(keys_file), "out": out, "documents": keys.height})
    return items


def run_parts(
    config: Any,
    items: list[dict[str, Any]],
    engine: str,
    workers: int,
    address: str | None,
    progress: bool,
    replayer: Any = None,
    label: str | None = None,
) -> None:
    """Every part on the engine; a ForensicsError naming the parts that failed for good.
    `--engine local --workers 1` runs them in this process, with `replayer` (the run's)."""
    todo = [i for i in items if not Path(i["out"]).is_file()]
    total = sum(i["documents"] for i in items)
    label = label or f"decode+score ({engine}, {workers} workers)"
    with progress_bar(progress, total, label) as advance:
        advance(total - sum(i["documents"] for i in todo))
        if engine == "local" and workers == 1:  # in this process: no pool to start
            for item in todo:
                advance(int(score_part(config, item, replayer)["documents"]))
            return
        failed = map_parts(
            engine,
            functools.partial(score_part, config),
            todo,
            workers,
            lambda result: advance(int(result["documents"])),
            address,
        )
    if failed:
        names = ", ".join(str(i["part"]) for i in failed[:10])
        raise ForensicsError(
            f"{len(failed)} of {len(items)} decode+score parts failed for good (parts {names}); "
            "the finished parts are kept: rerun the same command to retry only these"
        )


def merge_parts(items: list[dict[str, Any]]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(documents, scored documents) from the parts, in part order."""
    parts = [pl.read_parquet(i["out"]) for i in items]
    merged = pl.concat(parts, how="diagonal_relaxed") if parts else None
    if merged is None:
        raise ForensicsError("the window holds no documents to score")
    docs = merged.drop(BATCH_COLUMNS)
    columns = OUTPUT_COLUMNS + RULE_COLUMNS  # the rule keys too, as the in-process stage has
    scores = combine([BatchScores.from_frame(merged)], docs["text"]).select(columns)
    return docs, pl.concat([docs, scores], how="horizontal")
