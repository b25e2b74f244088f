"""Whole files of a block list: can the file-based families' data lose it by dropping files?

Hugging Face, OLMo-core and MosaicML streaming runs read their documents from a list of files
(shards). Removing single documents from such a file means rewriting it with the user's own
pipeline; removing whole files only means a shorter file list. This module answers which: the
run's family cuts its documents into its files (`Family.file_units`: `documents_by_facet` on the
family's file facet, the same lists the spike's blame used), and this checks the block list
against them.

One answer for two readers: `forensics.skip.action` (does the restart plan lead with
`forensics rebuild`?) and `forensics.rebuild` (what to drop, or the one-line refusal).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dataloaders.families import family_of
from dataloaders.family_base import FileUnit


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


def file_units(config: Any, replayer: Any) -> list[FileUnit]:
    """Every data file of a file-based run, in the run's order, with its documents."""
    return family_of(config).file_units(config, replayer)


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
    family = family_of(config)
    why = family.file_refusal(config, replayer)
    if why:
        return f"forensics rebuild: {why}; nothing was written"
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
            f"blocked, not the whole {family.file_facet}{more}; removing single documents "
            f"from {family.name} data needs your own pipeline (skip.json: documents); restart "
            "with the skip flags (restart-*.flags) as the stopgap; nothing was written"
        )
    return None
