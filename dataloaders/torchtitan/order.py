"""The documents one DP rank reads from one source, epoch by epoch, made by the real `datasets`
library on index-only copies of the data (as dataloaders/hf/order.py does, whose id dataset is
reused here).

torchtitan 0.3.0 (torchtitan/hf_datasets/text_datasets.py):
- every rank keeps `split_dataset_by_node(ds, dp_rank, dp_world_size)` (:95): a contiguous slice
  of a map-style Dataset, and for a streaming IterableDataset whole files when their number
  divides by the ranks, else every world_size-th example;
- epoch 0 is read in that order; on re-loop a map-style split is reshuffled with
  `self._original_data.shuffle(seed=42 + epoch)` (:179-181, the split, not the whole dataset)
  and a streaming one gets `set_epoch(epoch + 1)` (:183-184), with which `datasets` shuffles
  the stream's files (`shuffle_data_sources(np.random.default_rng(epoch))`);
- a map-style resume reads `self._data.skip(sample_idx)` of the saved epoch's order (:112-116,
  :203-211); a streaming one restores the IterableDataset's own state_dict (:212-218).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dataloaders.errors import ForensicsError
from dataloaders.hf import order as hf_order

SHUFFLE_SEED = 42  # text_datasets.py:181, `shuffle(seed=42 + self._epoch)`


def map_style_index(n_rows: int) -> Any:
    """An index-only map-style Dataset of n_rows rows (row i holds doc id i), shared by the
    ranks: each rank's split of it is a view."""
    datasets = hf_order._datasets()
    return datasets.Dataset.from_dict({hf_order.ID_COLUMN: np.arange(n_rows, dtype=np.int64)})


def map_style_split(index: Any, rank: int, world: int) -> Any:
    """The rank's `split_dataset_by_node` of the index Dataset (`map_style_index`)."""
    from datasets.distributed import split_dataset_by_node

    return split_dataset_by_node(index, rank=rank, world_size=world)


def split_ids(split: Any) -> np.ndarray:
    """The doc ids of a rank's split, in order (one slice of the whole split: datasets 5's
    `ds[column]` is a lazy column that numpy would read row by row)."""
    if not len(split):
        return np.zeros(0, dtype=np.int64)
    return np.asarray(split.with_format("numpy")[:][hf_order.ID_COLUMN], dtype=np.int64)


def map_style_epoch(ids: np.ndarray, epoch: int) -> np.ndarray:
    """Doc ids of a rank's split (`ids`, its order) in epoch `epoch`: from epoch 1 on,
    `Dataset.shuffle(seed=42 + epoch)`, which is `select(np.random.default_rng(seed)
    .permutation(len(self)))` (datasets 5.2.0 arrow_dataset.py:4949-4980; 4.7.0 the same).
    Computed here with numpy rather than by a select per rank and epoch (seconds each on a large
    split); test_torchtitan_family.py checks it against the library's shuffle."""
    if epoch == 0:
        return ids
    return ids[np.random.default_rng(SHUFFLE_SEED + epoch).permutation(len(ids))]


class StreamingSplit:
    """A streaming source's rank split over document ids (`shard << SHARD_SHIFT | row` while
    streaming, turned into row numbers with the files' row offsets)."""

    def __init__(self, base: Any, rank: int, world: int):
        from datasets.distributed import split_dataset_by_node

        self.ds = base if world == 1 else split_dataset_by_node(base, rank=rank, world_size=world)

    def order(self, epoch: int) -> np.ndarray:
        """Encoded doc ids of epoch `epoch`: datasets shuffles a stream's files with
        `np.random.default_rng(epoch)` from epoch 1 on even when the stream itself is not
        shuffled (datasets iterable_dataset.py, `_prepare_ex_iterable_for_iteration`,
        `if self.epoch: ... shuffle_data_sources`), so every epoch is asked of the library."""
        self.ds.set_epoch(epoch)
        ex = self.ds._prepare_ex_iterable_for_iteration()
        return np.fromiter(hf_order._ids(self.ds, ex), dtype=np.int64)

    def position_of_state(self, state: dict[str, Any], order: np.ndarray, where: str) -> int:
        """How many of the epoch's documents a saved IterableDataset state_dict had read: the
        state is loaded into the id dataset and the next id it yields is looked up in the
        epoch's order (the epoch's length when it yields none)."""
        try:
            self.ds.load_state_dict(state)  # the caller's order() set the state's epoch
            ex = self.ds._prepare_ex_iterable_for_iteration()
            first = next(iter(hf_order._ids(self.ds, ex)), None)
        except Exception as err:  # noqa: BLE001 - a state of another datasets layout
            raise ForensicsError(
                f"{where}: the saved streaming state does not fit this source's files "
                f"({type(err).__name__}: {err})"
            ) from None
        finally:
            self.ds.load_state_dict(None)  # back to the epoch's start for the next caller
        if first is None:
            return len(order)
        hits = np.flatnonzero(order == first)
        if not len(hits):
            raise ForensicsError(f"{where}: the saved streaming state points outside the split")
        return int(hits[0])
