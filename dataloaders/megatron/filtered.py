"""A Megatron dataset without some of its documents, written as a new `.bin/.idx` pair.

Used by `forensics rebuild` to drop a block list from a training dataset. The source pair is
never modified. The copy is vectorised: the kept sequences form contiguous byte runs of the
source `.bin` (Megatron writes sequences back to back, and `IndexedDataset` refuses a pair where
they are not), so the `.bin` is copied run by run in large blocks and the `.idx` is computed
from the source's arrays with numpy, never document by document. The output is byte-identical
to megatron-core's `IndexedDatasetBuilder` fed the kept documents in order
(tests/forensics/rebuild/test_rebuild.py holds it to that).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dataloaders.errors import ForensicsError
from dataloaders.megatron.indexed import IndexedDataset, bin_path, idx_path, write_idx

COPY_BLOCK = 1 << 26  # bytes read and written at a time (64 MiB)


@dataclass(frozen=True)
class FilteredDataset:
    """What a filtered copy holds, in terms of the source.

    kept        int64[K]: source doc_id of each document of the copy, in order (copy doc_id k is
                source doc_id kept[k])
    dropped     int64[R]: the source doc_ids left out, sorted, unique
    tokens_kept / tokens_dropped: token counts of each side
    """

    prefix: Path
    kept: np.ndarray
    dropped: np.ndarray
    tokens_kept: int
    tokens_dropped: int


def keep_mask(num_documents: int, drop: np.ndarray, where: str) -> np.ndarray:
    """bool[num_documents]: True for each document to keep; a doc_id out of range is an error
    (a block list made for another dataset must not be applied silently)."""
    drop = np.unique(np.asarray(drop, dtype=np.int64))
    if drop.size and (drop[0] < 0 or drop[-1] >= num_documents):
        bad = int(drop[0] if drop[0] < 0 else drop[-1])
        raise ForensicsError(
            f"{where}: block list names document {bad}, the dataset has {num_documents} "
            f"(0..{num_documents - 1}): made for other data?"
        )
    keep = np.ones(num_documents, dtype=bool)
    keep[drop] = False
    return keep


def byte_runs(source: IndexedDataset, sequence_keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) byte offsets in the source `.bin` of each maximal run of kept sequences."""
    # edges: +1 where a run of kept sequences starts, -1 one past where it ends
    edges = np.diff(np.concatenate([[0], sequence_keep.astype(np.int8), [0]]))
    first = np.flatnonzero(edges == 1)
    last = np.flatnonzero(edges == -1) - 1
    if first.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    item = source.dtype.itemsize
    starts = source.sequence_pointers[first].astype(np.int64)
    ends = source.sequence_pointers[last].astype(np.int64)
    ends = ends + source.sequence_lengths[last].astype(np.int64) * item
    return starts, ends


def copy_runs(src: Path, dst: Path, starts: np.ndarray, ends: np.ndarray) -> None:
    """Append the byte ranges [starts[i], ends[i]) of `src` to `dst`, in blocks."""
    with open(src, "rb") as reader, open(dst, "wb") as writer:
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            reader.seek(start)
            left = end - start
            while left > 0:
                block = reader.read(min(left, COPY_BLOCK))
                if not block:
                    raise ForensicsError(f"{src}: ended early while copying (changed meanwhile?)")
                writer.write(block)
                left -= len(block)


def copy_remote_runs(tokens: Any, dst: Path, starts: np.ndarray, ends: np.ndarray) -> None:
    """copy_runs for a `.bin` in object storage (a RemoteArray): each run read by ranges, in
    blocks, every read pinned to the ETag the index was checked against."""
    with open(dst, "wb") as writer:
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            for lo in range(start, end, COPY_BLOCK):
                writer.write(tokens.read_bytes(lo, min(end, lo + COPY_BLOCK)))


def write_without_documents(
    source_prefix: str | os.PathLike[str],
    drop: np.ndarray,
    prefix: str | os.PathLike[str],
    remote: str | None = None,
) -> FilteredDataset:
    """Write `prefix.bin/.idx`: the source dataset minus the documents `drop` (source doc_ids),
    every other document in its original order, with its sentence split kept.

    Both files are written under temporary names and renamed into place at the end, so an
    interrupted call leaves no half-written pair. Refuses to write over the source. `remote`:
    the source's URL when it is in object storage (the kept documents are read by ranges).
    """
    source = IndexedDataset(source_prefix, remote=remote)
    out = Path(prefix)
    if bin_path(out).resolve() == source.bin_file.resolve():
        raise ForensicsError(f"{out}: is the source dataset; a rebuild never overwrites its input")
    keep = keep_mask(source.num_documents, drop, str(source.idx_file))
    if not keep.any():
        raise ForensicsError(f"{source.idx_file}: the block list holds every document")
    # sequences per document (documents preprocessed with --split-sentences have several)
    per_doc = np.diff(source.document_indices)
    sequence_keep = np.repeat(keep, per_doc)
    lengths = source.sequence_lengths[sequence_keep]
    # document_indices of the copy: first sequence of each kept document, then the end
    doc_indices = np.zeros(int(keep.sum()) + 1, dtype=np.int64)
    np.cumsum(per_doc[keep], out=doc_indices[1:])
    out.parent.mkdir(parents=True, exist_ok=True)
    bin_tmp = bin_path(out).with_name(bin_path(out).name + ".tmp")
    idx_tmp = idx_path(out).with_name(idx_path(out).name + ".tmp")
    try:
        if remote is not None:
            copy_remote_runs(source.tokens, bin_tmp, *byte_runs(source, sequence_keep))
        else:
            copy_runs(source.bin_file, bin_tmp, *byte_runs(source, sequence_keep))
        write_idx(idx_tmp, lengths, doc_indices, source.dtype)
        os.replace(bin_tmp, bin_path(out))
        os.replace(idx_tmp, idx_path(out))
    finally:
        bin_tmp.unlink(missing_ok=True)
        idx_tmp.unlink(missing_ok=True)
    tokens = source.document_token_counts()
    return FilteredDataset(
        prefix=out,
        kept=np.flatnonzero(keep).astype(np.int64),
        dropped=np.flatnonzero(~keep).astype(np.int64),
        tokens_kept=int(tokens[keep].sum()),
        tokens_dropped=int(tokens[~keep].sum()),
    )
