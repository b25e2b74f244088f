"""Whole files of a block list: can the file-based families' data lose it by dropping files?

Hugging Face, OLMo-core and MosaicML streaming runs read their documents from a list of files
(shards). Removing single documents from such a file means rewriting it with the user's own
pipeline; removing whole files only means a shorter file list. This module answers which: it
cuts the run's documents into its files with the replayer (`documents_by_facet` on the family's
file facet, the same lists the spike's blame used), and checks the block list against them.

One answer for two readers: `forensics.skip.action` (does the restart plan lead with
`forensics rebuild`?) and `forensics.rebuild` (what to drop, or the one-line refusal).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FILE_FAMILIES = {"hf": "file", "olmo-core": "file", "mosaic-streaming": "shard"}  # format -> facet


@dataclass(frozen=True)
class FileUnit:
    """One data file of the run and its documents.

    dataset  the replay table's `dataset` (the HF run's name, the OLMo-core source, the stream)
    key      the file's value of the family's file facet (`file` / `shard`)
    path     the file on disk (absolute)
    doc_ids  1-D int64, the replay's doc_id of every document the file holds, in file order
    """

    dataset: str
    key: str
    path: Path
    doc_ids: np.ndarray


@dataclass
class Coverage:
    """The block list laid over the run's files.

    whole    files every document of which is blocked (what a rebuild drops)
    partial  (file, blocked documents in it) for files the block list covers only in part
    stray    (dataset, count) of blocked doc_ids that lie in no file of the run
    """

    whole: list[FileUnit]
    partial: list[tuple[FileUnit, int]]
    stray: list[tuple[str, int]]


def _listed(replayer: Any, dataset: str, facet: str, key: str, path: Path) -> FileUnit:
    docs = replayer.documents_by_facet(facet, key)
    ids = docs.filter(docs["dataset"] == dataset)["doc_id"].to_numpy().astype(np.int64)
    return FileUnit(dataset, key, Path(path).resolve(), ids)


def file_units(config: Any, replayer: Any) -> list[FileUnit]:
    """Every data file of a file-based run, in the run's order, with its documents."""
    fmt = config.data.format
    if fmt == "hf":
        return [
            _listed(replayer, config.data.name, "file", s.name, s.path) for s in replayer.shards
        ]
    if fmt == "olmo-core":
        return [_listed(replayer, f.source, "file", str(f.path), f.path) for f in replayer.files]
    if fmt == "mosaic-streaming":
        return [
            _listed(replayer, name, "shard", shard.path.name, shard.path)
            for name, stream in zip(replayer.names, replayer.streams, strict=True)
            for shard in stream.shards
        ]
    raise ValueError(f"{fmt}: not a file-based data family")


def coverage(units: list[FileUnit], documents: dict[str, list[int]]) -> Coverage:
    """Which files the block list (`skip.json` documents: dataset -> doc_ids) covers whole, in
    part, and how many blocked ids fall in no file."""
    out = Coverage([], [], [])
    for name, ids in documents.items():
        blocked = np.unique(np.asarray(ids, dtype=np.int64))
        placed = np.zeros(blocked.size, dtype=bool)
        for unit in (u for u in units if u.dataset == name):
            hit = np.isin(blocked, unit.doc_ids)
            placed |= hit
            n = int(hit.sum())
            if n and n == np.unique(unit.doc_ids).size:
                out.whole.append(unit)
            elif n:
                out.partial.append((unit, n))
        if not placed.all():
            out.stray.append((name, int((~placed).sum())))
    return out


def refusal(config: Any, replayer: Any, documents: dict[str, list[int]]) -> str | None:
    """Why `forensics rebuild` cannot drop this block list as whole files (one line), or None
    when it can. Only for the file-based families."""
    fmt = config.data.format
    if fmt == "hf" and config.data.path is not None:
        return (
            f"forensics rebuild: data.path {config.data.path} is a save_to_disk folder, not a "
            "file list; remove skip.json's block list with your own pipeline (restart with the "
            "skip flags, restart-*.flags, as the stopgap); nothing was written"
        )
    if fmt == "olmo-core" and config.data.resumes:
        return (
            "forensics rebuild: an olmo-core run with data.resumes is not rebuilt (the file "
            "numbers of doc_ids span its data stages); nothing was written"
        )
    if fmt == "hf" and len({s.name for s in replayer.shards}) != len(replayer.shards):
        return (
            "forensics rebuild: two data files share a name (the file facet); nothing was written"
        )
    cover = coverage(file_units(config, replayer), documents)
    if cover.stray:
        name, n = cover.stray[0]
        return f"forensics rebuild: {n} blocked doc_id(s) of {name} lie in no file of this run"
    if cover.partial:
        unit, n = cover.partial[0]
        more = (
            f" (and {len(cover.partial) - 1} more such file(s))" if len(cover.partial) > 1 else ""
        )
        return (
            f"forensics rebuild: {unit.path}: {n} of its {len(unit.doc_ids)} documents are "
            f"blocked, not the whole {FILE_FAMILIES[fmt]}{more}; removing single documents from "
            f"{fmt} data needs your own pipeline (skip.json: documents); restart with the skip "
            "flags (restart-*.flags) as the stopgap; nothing was written"
        )
    return None
