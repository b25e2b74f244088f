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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from dataloaders.atomic import write_parquet_atomic, write_parquet_parts
from dataloaders.mapped_pages import releasing_pages
from dataloaders.progress import progress_bar
from forensics.errors import ForensicsError
from forensics.pipeline.engines import map_parts
from forensics.replay import cached_replayer
from forensics.score.batches import BATCH_COLUMNS, score_batch
from forensics.score.skeleton import (
    BINS,
    Bands,
    SignatureRows,
    cluster_bands,
    skeleton_scores,
)
from forensics.score.spam import SpamSignals
from forensics.score.table import OUTPUT_COLUMNS, RULE_COLUMNS, assemble_scores
from forensics.spike.repeats import document_repeats
from forensics.spike.token_signal import part_token_stats

PART_DOCUMENTS = 2_000  # documents per task: a few seconds of work, ~10 MB of text


@releasing_pages
def score_part(config: Any, item: dict[str, Any], replayer: Any = None) -> dict[str, Any]:
    """Worker: decode and score one part's documents into `item["out"]` (kept if present);
    with `item["unigrams"]` their token figures into `item["tokens"]`
    (forensics.spike.token_signal.part_token_stats), and with `item["repeats"]` their
    repeated n-grams (forensics.spike.repeats.document_repeats); `replayer`: the run's, when
    the part runs in the driver."""
    out = Path(item["out"])
    if not out.is_file():
        replayer = replayer or cached_replayer(config)
        keys = pl.read_parquet(item["keys"])
        if item.get("unigrams") and not Path(item["tokens"]).is_file():
            part_token_stats(replayer, keys, Path(item["unigrams"]), Path(item["tokens"]))
        if item.get("repeats") and not Path(item["repeats"]).is_file():
            found = document_repeats(replayer, keys)
            if found is not None:
                write_parquet_atomic(found, Path(item["repeats"]))
        docs = replayer.documents(keys, progress=False)
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
    label = label or f"decode+score ({engine}, {workers} worker{'' if workers == 1 else 's'})"
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


def merge_parts(items: list[dict[str, Any]], docs_file: Path | None, scores_file: Path) -> None:
    """The parts merged into the decoded documents (`docs_file`, unless present or None) and
    the scored documents (`scores_file`), in part order, each written atomically part by part:
    the texts are never held whole. What crosses documents (the template clusters) is computed
    from each document's skeleton bands and text hash, read part by part without the texts;
    the signatures of the documents a candidate pair holds and the few texts the clusters then
    need (`_stand_in_texts`) are read alone."""

    files = [str(i["out"]) for i in items]
    scores = score_columns(files)
    if docs_file is not None and not docs_file.is_file():
        _write_by_part(files, docs_file, lambda part, _: part.drop(BATCH_COLUMNS, strict=False))
    _write_by_part(files, scores_file, lambda part, at: pl.concat(
        [part.drop(BATCH_COLUMNS, strict=False), scores.slice(at, part.height)], how="horizontal"
    ))  # fmt: skip


def score_columns(files: list[str]) -> pl.DataFrame:
    """The scores of the parts' documents, in part order: `combine`'s table
    (forensics.score.batches), the template clusters computed across every part."""
    if not files:
        raise ForensicsError("the window holds no documents to score")
    meta, bands, heights = _per_document_columns(files)
    return _merged_scores(meta, bands, heights, files)


def part_columns(files: list[str], leave_out: set[str]) -> pl.DataFrame:
    """The parts' own columns (keys, facets: what the replayer decoded) but `leave_out` and the
    per-document scores, in part order, each part cast to the first's types (as `merge_parts`
    writes them): beside `score_columns`, the merged table without writing it."""
    frames: list[pl.DataFrame] = []
    for f in files:
        columns = [c for c in pl.read_parquet_schema(f) if c not in leave_out
                   and c not in BATCH_COLUMNS]  # fmt: skip
        part = pl.read_parquet(f, columns=columns)
        frames.append(part.cast(dict(frames[0].schema)) if frames else part)
    return pl.concat(frames, how="vertical")


SIGNATURE_COLUMNS = {"skeleton": "sig_skeleton", "raw": "sig_raw"}
META_COLUMNS = tuple(c for c in BATCH_COLUMNS if c not in SIGNATURE_COLUMNS.values())


def _per_document_columns(files: list[str]) -> tuple[pl.DataFrame, Bands, np.ndarray]:
    """Every part's per-document scores, text hash and emptiness (no texts, no signatures),
    the LSH bands of its eligible documents' skeleton signatures (`Bands`) and its row count,
    read one part at a time: the signatures of every scored document at once are 2 KB a
    document."""
    text = pl.col("text").cast(pl.Utf8)
    metas: list[pl.DataFrame] = []
    bands: list[Bands] = []
    for f in files:
        part = (
            pl.scan_parquet(f)
            .select(*META_COLUMNS, "sig_skeleton", _hash=text.hash(5), _empty=_is_empty(text))
            .collect()
        )
        eligible = part["sig_eligible"].to_numpy()
        bands.append(Bands.of(_signature_array(part["sig_skeleton"])[eligible]))
        metas.append(part.drop("sig_skeleton"))
    heights = np.array([m.height for m in metas], dtype=np.int64)
    return pl.concat(metas, how="diagonal_relaxed"), Bands.concat(bands), heights


def _signature_array(column: pl.Series) -> np.ndarray:
    """A signature column (fixed-size UInt64 arrays) as uint64 [rows, BINS]."""
    return np.asarray(column.to_numpy(), dtype=np.uint64).reshape(len(column), BINS)


def _signature_rows(files: list[str], heights: np.ndarray, eligible: np.ndarray) -> SignatureRows:
    """`cluster_bands`'s reader: the "skeleton" or "raw" signatures of eligible documents (by
    position among them), read from the parts that hold them, one part at a time."""
    starts = np.concatenate([[0], np.cumsum(heights)])
    eligible_rows = np.flatnonzero(eligible)

    def rows(kind: str, at: np.ndarray) -> np.ndarray:
        wanted = eligible_rows[at]  # sorted: `at` is
        out = np.empty((len(wanted), BINS), dtype=np.uint64)
        bounds = np.searchsorted(wanted, starts)
        for part, f in enumerate(files):
            lo, hi = bounds[part], bounds[part + 1]
            if lo == hi:
                continue
            column = pl.read_parquet(f, columns=[SIGNATURE_COLUMNS[kind]]).to_series()
            out[lo:hi] = _signature_array(column)[wanted[lo:hi] - starts[part]]
        return out

    return rows


def _is_empty(text: pl.Expr) -> pl.Expr:
    return text.is_null() | (text.str.len_chars().fill_null(0) == 0)


def _merged_scores(
    meta: pl.DataFrame, bands: Bands, heights: np.ndarray, files: list[str]
) -> pl.DataFrame:
    """`combine`'s table (forensics.score.batches) from the parts' per-document columns, their
    text hashes and emptiness, the skeleton bands, the signatures of the documents some
    candidate pair holds, and the texts of the documents a template cluster holds."""
    eligible, short = meta["sig_eligible"].to_numpy(), meta["sig_short"].to_numpy()
    rows = _signature_rows(files, heights, eligible)
    clusters = cluster_bands(bands, eligible, short, meta["_hash"].to_numpy(), rows)
    shared = np.flatnonzero(skeleton_scores(clusters)[0] > 0)
    texts = _stand_in_texts(files, meta["_empty"], shared)
    spam = SpamSignals(meta["spam_doc_score"].to_numpy(), meta["spam_doc_reason"].to_list(),
                       meta["spam_doc_rule"].to_list(), {})  # fmt: skip
    garbage = meta.select("garbage_score", "garbage_reason", "garbage_rule")
    scored = assemble_scores(texts, garbage, spam, clusters, keys=True)
    return scored.select(OUTPUT_COLUMNS + RULE_COLUMNS)


def _stand_in_texts(files: list[str], empty: pl.Series, shared: np.ndarray) -> pl.Series:
    """What `assemble_scores` reads of the texts, without the texts: each one's emptiness
    (an empty text scores 0), and the real text of each document in a template cluster
    (`shared`: licence notices and code-like short pages are waived there). Other rows hold
    a one-character stand-in, never read but as not empty."""
    stand_in = pl.select(pl.when(empty).then(pl.lit("")).otherwise(pl.lit("x"))).to_series()
    if not len(shared):
        return stand_in.rename("text")
    wanted = pl.Series(shared, dtype=pl.UInt32)
    real = (
        pl.concat([pl.scan_parquet(f).select(pl.col("text").cast(pl.Utf8)) for f in files])
        .with_row_index("_row")
        .filter(pl.col("_row").is_in(wanted.implode()))
        .sort("_row")
        .collect(engine="streaming")
    )
    return stand_in.scatter(real["_row"].to_numpy(), real["text"]).rename("text")


def _write_by_part(
    files: list[str], path: Path, rows: Callable[[pl.DataFrame, int], pl.DataFrame]
) -> None:
    """`rows(part, first row)` of each part file, in order, as one Parquet file at `path`
    (one row group per part, written atomically): one part in memory at a time."""

    def parts() -> Iterator[pl.DataFrame]:
        at = 0
        for f in files:
            part = pl.read_parquet(f)
            yield rows(part, at)
            at += part.height

    write_parquet_parts(parts(), path)
