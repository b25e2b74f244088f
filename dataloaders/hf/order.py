"""The order in which a Hugging Face `datasets` pipeline hands out documents, made by the real
library on an index-only copy of the data.

Why drive the library rather than reimplement it: a streaming shuffle's order depends on the shard
order after `shuffle_data_sources`, the shuffle buffer's numpy Generator, `set_epoch`'s reseeding,
`max_buffer_input_shards` interleaving, and the sizes of the Arrow tables each file reader yields
(the Arrow path shuffles whole tables); all of these change between `datasets` versions. So we
build the same `IterableDataset` the run built, but swap its table generator for one that yields,
for every table the real reader produced, a table of the same length holding only document ids.
Every shuffle, split and rebatching step then runs unchanged on ids.

Document ids while streaming are `shard << SHARD_SHIFT | row` (row = position in the file as the
reader yields it); `to_global_ids` turns them into the dataset-wide row number (file order, like a
map-style `Dataset` of the same files) once every file's row count is known.

A torch DataLoader with `num_workers > 0` runs one copy of the dataset per worker: worker w keeps
every num_workers-th shard (`shard_data_sources(..., contiguous=False)`) and shifts its buffer RNG
by w, then the loader returns the workers' batches round robin. `datasets` does that split in
`IterableDataset._iter_pytorch`, which needs torch; we make the same library calls without it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dataloaders.base import round_robin
from dataloaders.errors import ForensicsError
from dataloaders.hf.shards import Shard

SHARD_SHIFT = 40  # rows per shard < 2**40; shard index in the high bits
ID_COLUMN = "__forensics_doc"


def _datasets():  # noqa: ANN202 - the module
    """Import `datasets` offline (no hub lookups from a forensics run)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    import datasets

    # datasets logs a file it cannot read as an ERROR line before raising; the raised error is
    # turned into one line naming the file (rows._named_errors), so its log line would be a
    # second one
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    return datasets


@contextmanager
def without_torch() -> Iterator[None]:
    """`datasets` imports torch (seconds) for every IterableDataset it builds when torch is
    installed, only to share the epoch counter with DataLoader workers and subclass torch's
    IterableDataset. Replay uses neither, and `forensics replay` must not import torch, so while
    torch is not loaded yet we tell datasets it is absent. The order does not depend on it."""
    config = _datasets().config
    if "torch" in sys.modules or not config.TORCH_AVAILABLE:
        yield
        return
    config.TORCH_AVAILABLE = False
    try:
        yield
    finally:
        config.TORCH_AVAILABLE = True


@dataclass
class RowCounter:
    """Rows seen per shard by the id tables (a file read to its end gives its row count)."""

    rows: dict[int, int] = field(default_factory=dict)
    complete: set[int] = field(default_factory=set)


class IdTables:
    """Wraps a packaged builder's `_generate_tables`: same keys, same table lengths, but the only
    column is the document id. Picklable (no closures) like the function it wraps."""

    def __init__(self, generate_tables_fn: Any, shard_of: dict[str, int], counter: RowCounter):
        self.generate_tables_fn = generate_tables_fn
        self.shard_of = shard_of
        self.counter = counter

    def __call__(self, **gen_kwargs: Any) -> Iterator[tuple[Any, Any]]:
        import pyarrow as pa

        files = gen_kwargs.get("original_files", gen_kwargs.get("files"))
        if not isinstance(files, list):
            raise ForensicsError("datasets builder without a file list: cannot replay it")
        seen: dict[int, int] = {}
        for key, table in self.generate_tables_fn(**gen_kwargs):
            shard = self.shard_of[str(files[key.original_shard_id])]
            start = seen.get(shard, 0)
            seen[shard] = start + len(table)
            ids = (np.int64(shard) << SHARD_SHIFT) + np.arange(start, start + len(table))
            yield key, pa.table({ID_COLUMN: pa.array(ids, type=pa.int64())})
        for shard, rows in seen.items():  # the generator ran to the end of these files
            self.counter.rows[shard] = rows
            self.counter.complete.add(shard)


def streaming_source(shards: list[Shard], builder: str) -> tuple[Any, Any]:
    """The run's `load_dataset(builder, data_files=..., streaming=True)` -> (dataset, features)."""
    datasets = _datasets()
    files = [str(s.path) for s in shards]
    try:
        real = datasets.load_dataset(builder, data_files=files, split="train", streaming=True)
    except Exception as err:  # datasets raises many types for unreadable files
        raise ForensicsError(f"cannot open {files[0]} with datasets ({builder}): {err}") from None
    return real, real.features


def id_dataset(real: Any, shards: list[Shard], counter: RowCounter) -> Any:
    """An IterableDataset identical to `real` except that rows are document ids."""
    datasets = _datasets()
    from datasets.iterable_dataset import ArrowExamplesIterable, IterableDataset

    source = real._ex_iterable
    if not isinstance(source, ArrowExamplesIterable):
        raise ForensicsError(f"unexpected datasets source {type(source).__name__}; cannot replay")
    shard_of = {str(s.path): s.index for s in shards}
    ids = ArrowExamplesIterable(
        IdTables(source.generate_tables_fn, shard_of, counter),
        source.kwargs,
        source.generate_more_kwargs_fn,
    )
    info = datasets.DatasetInfo(features=datasets.Features({ID_COLUMN: datasets.Value("int64")}))
    return IterableDataset(ids, info=info, split=real.split)


def pipeline(base: Any, cfg: Any, rank: int) -> Any:
    """Apply the run's shuffle / split / format to the id dataset, as the run did."""
    from datasets.distributed import split_dataset_by_node

    ds = base
    if cfg.shuffle:
        ds = ds.shuffle(
            seed=cfg.seed,
            buffer_size=cfg.buffer_size,
            max_buffer_input_shards=cfg.max_buffer_input_shards,
        )
    if cfg.world_size > 1:
        try:
            ds = split_dataset_by_node(
                ds, rank=rank, world_size=cfg.world_size, strategy=cfg.split_strategy
            )
        except ValueError as err:
            raise ForensicsError(f"data.split_strategy: {err}") from None
    if cfg.with_format is not None:
        ds = ds.with_format(cfg.with_format)
    return ds


def _ids(ds: Any, ex_iterable: Any) -> Iterator[int]:
    """Iterate a prepared examples iterable the way IterableDataset.__iter__ / _iter_pytorch do:
    formatted datasets go through the Arrow path (which shuffles whole tables), others per
    example."""
    if ds._formatting and (ex_iterable.iter_arrow or ds._formatting.is_table):
        for _, table in ex_iterable.iter_arrow():
            yield from table.column(ID_COLUMN).to_numpy().tolist()
    else:
        for _, example in ex_iterable:
            yield example[ID_COLUMN]


def _batches(ids: Iterator[int], batch_size: int, drop_last: bool) -> list[np.ndarray]:
    """A DataLoader's auto-collation of one iterable: consecutive batch_size groups."""
    flat = np.fromiter(ids, dtype=np.int64)
    cuts = list(range(0, len(flat), batch_size))
    out = [flat[c : c + batch_size] for c in cuts]
    if drop_last and out and len(out[-1]) < batch_size:
        out.pop()
    return out


def epoch_batches(
    ds: Any, cfg: Any, epoch: int, *, resume_after: list[int] | None = None
) -> list[np.ndarray]:
    """One rank's DataLoader batches for one epoch (document ids, streaming encoding).

    resume_after: batch counts (within this epoch) after which the run restarted from the
    dataset's state_dict (num_workers 0): the library restores the source position and refills the
    shuffle buffer from there, which is what we replay.
    """
    from datasets.iterable_dataset import shift_ex_examples_rngs

    ds.set_epoch(epoch if cfg.set_epoch else 0)
    size = cfg.per_device_batch_size
    if cfg.num_workers == 0:
        if not resume_after:
            ex = ds._prepare_ex_iterable_for_iteration()
            return _batches(_ids(ds, ex), size, cfg.drop_last)
        return _resumed_batches(ds, cfg, resume_after)
    per_worker = []
    for worker in range(cfg.num_workers):
        ex = ds._prepare_ex_iterable_for_iteration()
        if not ex.split_shard_indices_by_worker(cfg.num_workers, worker, contiguous=False):
            per_worker.append([])
            continue
        ex = ex.shard_data_sources(num_shards=cfg.num_workers, index=worker, contiguous=False)
        ex = shift_ex_examples_rngs(ex_iterable=ex, value=worker)
        per_worker.append(_batches(_ids(ds, ex), size, cfg.drop_last))
    return round_robin(per_worker)


def _resumed_batches(ds: Any, cfg: Any, resume_after: list[int]) -> list[np.ndarray]:
    """Batches of an epoch interrupted after the given batch counts and resumed each time from the
    dataset's state_dict (taken right after the last example of the last trained batch)."""
    size = cfg.per_device_batch_size
    out: list[np.ndarray] = []
    state = None
    stops = sorted(set(resume_after)) + [None]
    for stop in stops:
        if state is not None:
            ds.load_state_dict(state)
        ex = ds._prepare_ex_iterable_for_iteration()
        current: list[int] = []
        for doc in _ids(ds, ex):
            current.append(doc)
            if len(current) == size:
                out.append(np.array(current, dtype=np.int64))
                current = []
                if stop is not None and len(out) == stop:
                    break
        else:
            if current and not cfg.drop_last:
                out.append(np.array(current, dtype=np.int64))
            break  # the epoch ended before the next restart
        state = ds.state_dict()
    ds.load_state_dict(None)
    return out


def to_global_ids(encoded: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """`shard << SHARD_SHIFT | row` -> dataset-wide row number (files concatenated in order)."""
    shard = encoded >> SHARD_SHIFT
    row = encoded & ((1 << SHARD_SHIFT) - 1)
    return offsets[shard] + row


def map_style_order(n_rows: int, cfg: Any, epoch: int) -> np.ndarray:
    """Document order of a map-style epoch: the real `Dataset.shuffle(seed)` permutation on an
    index-only Dataset (seed + epoch when reshuffling per epoch)."""
    datasets = _datasets()
    ds = datasets.Dataset.from_dict({ID_COLUMN: np.arange(n_rows, dtype=np.int64)})
    if cfg.shuffle:
        ds = ds.shuffle(seed=cfg.seed + (epoch if cfg.set_epoch else 0), keep_in_memory=True)
    return np.asarray(ds.with_format("numpy")[ID_COLUMN], dtype=np.int64)


def map_style_rank_batches(n_samples: int, cfg: Any, rank: int) -> list[np.ndarray]:
    """Rank `rank`'s batches over an epoch of n_samples samples (positions in the epoch's sample
    order): split_dataset_by_node on a map-style Dataset keeps a contiguous slice."""
    datasets = _datasets()
    from datasets.distributed import split_dataset_by_node

    ds = datasets.Dataset.from_dict({ID_COLUMN: np.arange(n_samples, dtype=np.int64)})
    if cfg.world_size > 1:
        ds = split_dataset_by_node(ds, rank=rank, world_size=cfg.world_size)
    mine = np.asarray(ds.with_format("numpy")[ID_COLUMN], dtype=np.int64)
    return _batches(iter(mine.tolist()), cfg.per_device_batch_size, cfg.drop_last)
