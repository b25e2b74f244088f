"""The cluster stage's output kept on disk: ranked clusters, embedding assignments, notes.

Clustering, embedding (k-means and PCA over the cached vectors) and the baseline fit depend on
the window's and baseline's scored documents (named by the run key and the scorer's version),
the embedding options and the code; none of the cheap options (--threshold, --culprit, --after)
enter them. A rerun with the same key reads three files back instead of redoing them:

    clusters-<k>.parquet   the ranked clusters with verdicts (Clusters.ranked)
    assign-<k>.parquet     one row per embedded document (Clusters.assignments; absent: none)
    clusters-<k>.json      the embedding note and the notes the stage added to the report's

The JSON is written last and read first: a key whose JSON exists has both tables.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from dataloaders.atomic import write_json_atomic, write_parquet_atomic
from forensics.pipeline import StageClock, cache_key, module_version
from forensics.spike.options import EmbedSettings

CODE = ("forensics", "dataloaders")  # the packages whose source the stage's output depends on
KEPT_KEYS = 4  # cluster outputs kept (embedding options or code versions a user goes between)


def clusters_key(run_key: str, embedding: EmbedSettings, scored: str | None = None) -> str:
    """The stage's inputs: the run key (config, data, window, baseline), the scorer's and the
    code's versions, the embedding settings, and (`scored`) the documents scored when they were
    a sample (None: every document)."""
    model = embedding.model
    extra = {} if scored is None else {"scored": scored}
    return cache_key(
        **extra,
        run=run_key,
        code=[module_version(p) for p in CODE],
        embed_cap=embedding.cap,
        embed_model=None if model is None else model_identity(model),
        device=embedding.device,
    )


def model_identity(model: Any) -> Any:
    """A named model as named; a model directory by its path and its files' sizes and mtimes
    (a re-trained model in the same directory gives another key)."""
    path = Path(str(model)).expanduser()
    if not path.is_dir():
        return str(model)
    files = sorted(p for p in path.rglob("*") if p.is_file())
    return [str(path.resolve()), [(str(p.relative_to(path)), p.stat().st_size,
                                   p.stat().st_mtime_ns) for p in files]]  # fmt: skip


def read_clusters(cache: Path, key: str) -> tuple[pl.DataFrame, pl.DataFrame | None, dict] | None:
    """(ranked, assignments, meta) written under `key`, or None (absent or unreadable: the
    stage recomputes)."""
    try:
        meta = json.loads((cache / f"clusters-{key}.json").read_text())
        ranked = pl.read_parquet(cache / f"clusters-{key}.parquet")
        assign = pl.read_parquet(cache / f"assign-{key}.parquet") if meta["assignments"] else None
    except Exception:  # noqa: BLE001 - a damaged cache file is recomputed, never trusted
        return None
    return ranked, assign, meta


def drop_stale(cache: Path, key: str, keep: int = KEPT_KEYS) -> None:
    """Delete the files of all but the `keep` most recently used keys (`key`, just read or
    written, is marked used): each code version or embedding option leaves a key behind."""
    try:
        os.utime(cache / f"clusters-{key}.json")
        metas = sorted(cache.glob("clusters-*.json"), key=lambda p: p.stat().st_mtime_ns)
    except OSError:
        return
    for meta in metas[:-keep]:
        stale = meta.name[len("clusters-") : -len(".json")]
        for name in (f"clusters-{stale}.json", f"clusters-{stale}.parquet",
                     f"assign-{stale}.parquet"):  # fmt: skip
            (cache / name).unlink(missing_ok=True)


def write_clusters(
    cache: Path, key: str, ranked: pl.DataFrame, assign: pl.DataFrame | None, meta: dict
) -> None:
    """The stage's output under `key` (the JSON last)."""
    write_parquet_atomic(ranked, cache / f"clusters-{key}.parquet")
    if assign is not None:
        write_parquet_atomic(assign, cache / f"assign-{key}.parquet")
    write_json_atomic(cache / f"clusters-{key}.json", {**meta, "assignments": assign is not None})


def cached_clusters(
    cache: Path,
    key: str,
    notes: list[str],
    hits: dict[str, bool],
    clock: StageClock,
    compute: Callable[[], tuple[pl.DataFrame, pl.DataFrame | None, dict | None]],
) -> tuple[pl.DataFrame, pl.DataFrame | None, dict | None]:
    """(ranked, assignments, embedding note) read back, or computed and kept; the notes the
    computation appended to `notes` are kept with them and appended again on a read. A read
    is timed as the `cluster` stage; a computation times its own stages."""
    with clock.stage("cluster", "read from the stage cache", spinner=True):
        found = read_clusters(cache, key)
    if found is not None:
        ranked, assign, meta = found
        notes.extend(meta["notes"])
        hits["cluster"] = True
        drop_stale(cache, key)
        return ranked, assign, meta["embedding_note"]
    before = len(notes)
    ranked, assign, note = compute()
    meta = {"embedding_note": note, "notes": notes[before:]}
    write_clusters(cache, key, ranked, assign, meta)
    hits["cluster"] = False
    drop_stale(cache, key)
    return ranked, assign, note
