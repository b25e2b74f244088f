"""The order a MosaicML StreamingDataset + torch DataLoader run fed its samples, epoch by epoch.

One epoch (batching_method "random", batching/random.py:23-80 of mosaicml-streaming 0.13.0):
resample the streams (sampling.py), partition the epoch's positions over nodes, ranks, workers
and batches from `sample_in_epoch` on (partition.py), map positions through the epoch's shuffle
(shuffle.py), then resampled ids to underlying samples.

Then what each rank's DataLoader yields. Worker w of a rank iterates its partition row
`ids[node, rank_of_node, w].flatten()` skipping -1 (dataset.py:1055, 1430-1473); the DataLoader
cuts each worker's stream into batches of batch_size (the last one short unless drop_last) and
yields them round robin over the workers, skipping a worker once it is exhausted
(torch/utils/data/dataloader.py, _MultiProcessingDataLoaderIter._next_data / _try_put_index:
a worker that raises _IterableDatasetStopIteration is shut down and its turn passes on).
With num_workers 0 the rank counts as one worker (World._get_worker_info, world.py).

Arrays built here:
    epoch_batches  list over ranks of list over batches of int64[<= batch_size] underlying
                   sample ids (global over all streams: stream offset + index in the stream)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dataloaders.base import round_robin
from dataloaders.mosaic.partition import get_partitions
from dataloaders.mosaic.sampling import apply_weights, resample_streams
from dataloaders.mosaic.shuffle import get_shuffle


@dataclass(frozen=True)
class World:
    """The run's world as StreamingDataset sees it (World.detect, world.py)."""

    num_nodes: int
    ranks_per_node: int
    workers_per_rank: int  # DataLoader num_workers, or 1 without workers

    @property
    def num_ranks(self) -> int:
        return self.num_nodes * self.ranks_per_node

    def replicate(self, replication: int | None) -> World:
        """The world StreamingDataset partitions over when `replication` consecutive ranks share
        their samples (World.replicate, world.py:117-148; dataset.py:371-374): num_ranks / R
        ranks, on num_ranks / R / ranks_per_node nodes when that divides, else on one node."""
        if replication is None:
            return self
        if replication <= 0 or self.num_ranks % replication:
            raise ValueError(f"world size {self.num_ranks} is not divisible by {replication}")
        num_ranks = self.num_ranks // replication
        num_nodes = num_ranks // self.ranks_per_node if num_ranks % self.ranks_per_node == 0 else 1
        return World(num_nodes, num_ranks // num_nodes, self.workers_per_rank)


@dataclass(frozen=True)
class Plan:
    """Everything the epoch order depends on, resolved to the library's effective values."""

    samples_per_shard: np.ndarray  # int64[shards], all streams' shards in stream order
    shards_per_stream: np.ndarray  # int64[streams]
    choose_per_stream: np.ndarray  # int64[streams] (apply_weights)
    shuffle: bool
    shuffle_algo: str
    shuffle_seed: int
    shuffle_block_size: int
    num_canonical_nodes: int
    partition_algo: str
    sampling_method: str
    sampling_granularity: int
    batch_size: int
    drop_last: bool

    @property
    def epoch_size(self) -> int:
        return int(self.choose_per_stream.sum())


def default_canonical_nodes(shuffle_algo: str, num_nodes: int) -> int:
    """StreamingDataset._resume's default when num_canonical_nodes is None (dataset.py:702-716)."""
    return 64 * num_nodes if shuffle_algo in ("py1s", "py2s") else num_nodes


def default_block_size(num_canonical_nodes: int) -> int:
    """_set_shuffle_block_size's default (dataset.py:681-689)."""
    return max(4_000_000 // num_canonical_nodes, 1 << 18)


def choose_per_stream(
    weights: list[tuple[float | None, float | None, int | None]],
    samples_per_stream: np.ndarray,
    epoch_size: int | None,
    seed: int,
) -> np.ndarray:
    return apply_weights(weights, samples_per_stream, epoch_size, seed)


def partition_positions(
    plan: Plan, world: World, sample_in_epoch: int, initial_physical_nodes: int | None
) -> np.ndarray:
    """The epoch's positions over nodes, ranks, workers and batches from `sample_in_epoch` on,
    int64[nodes, ranks, workers, batches per worker, batch size], -1 = padding (partition.py)."""
    return get_partitions(
        plan.partition_algo,
        plan.epoch_size,
        plan.num_canonical_nodes,
        world.num_nodes,
        world.ranks_per_node,
        world.workers_per_rank,
        plan.batch_size,
        sample_in_epoch,
        initial_physical_nodes,
    )


def epoch_partition(
    plan: Plan,
    world: World,
    epoch: int,
    sample_in_epoch: int,
    initial_physical_nodes: int | None = None,
) -> np.ndarray:
    """Underlying sample ids, int64[nodes, ranks, workers, batches per worker, batch size], -1 =
    padding (generate_work_random_batching, batching/random.py:23-80)."""
    units, small_per_big = resample_streams(
        plan.samples_per_shard,
        plan.shards_per_stream,
        plan.choose_per_stream,
        seed=plan.shuffle_seed,
        epoch=epoch,
        sampling_method=plan.sampling_method,
        granularity=plan.sampling_granularity,
        epoch_seed_change=plan.shuffle and plan.sampling_method == "balanced",  # dataset.py:428
    )
    big = partition_positions(plan, world, sample_in_epoch, initial_physical_nodes)
    if plan.shuffle:
        perm = get_shuffle(
            plan.shuffle_algo,
            units,
            plan.num_canonical_nodes,
            plan.shuffle_seed,
            epoch,
            plan.shuffle_block_size,
        )
        big = np.where(big != -1, perm[np.maximum(big, 0)], -1)
    return np.where(big != -1, small_per_big[np.maximum(big, 0)], -1)


def loader_batches(worker_rows: np.ndarray, batch_size: int, drop_last: bool) -> list[np.ndarray]:
    """The batches one rank's DataLoader yields, given its workers' partition rows
    int64[workers, batches per worker, batch size] (see the module docstring)."""
    per_worker = []
    for row in worker_rows:
        stream = row.reshape(-1)
        stream = stream[stream != -1]
        n_full = len(stream) // batch_size
        batches = [stream[k * batch_size : (k + 1) * batch_size] for k in range(n_full)]
        if not drop_last and len(stream) % batch_size:
            batches.append(stream[n_full * batch_size :])
        per_worker.append(batches)
    return round_robin(per_worker)


def loader_steps(ids: np.ndarray, batch_size: int, drop_last: bool) -> tuple[np.ndarray, ...]:
    """(batch, position, sample) of every yielded sample, for the partition
    ids int64[nodes, ranks, workers, batches per worker, batch size] (-1 = padding).

    Vectorised form of loader_batches over all ranks: worker w's stream is its row without
    -1; element e of it is in worker batch e // batch_size at slot e % batch_size; the rank's
    DataLoader yields worker batches round robin (worker batch k of worker w before k of w+1,
    before k+1 of w), skipping exhausted workers, so a rank's batch number is the rank of the key
    k * workers + w among the keys that rank has. Ranks beyond the shortest are cut (none are:
    the partition gives every rank the same sample count)."""
    nodes, ranks, workers = ids.shape[:3]
    flat = ids.reshape(nodes * ranks, workers, -1)
    valid = flat != -1
    e = np.cumsum(valid, axis=2) - 1
    if drop_last:
        full = (valid.sum(axis=2) // batch_size * batch_size)[..., None]
        valid &= e < full
    k = e // batch_size
    key = k * workers + np.arange(workers)[None, :, None]
    batches, positions, samples = [], [], []
    per_rank = []
    for r in range(flat.shape[0]):
        keep = valid[r]
        rank_keys = key[r][keep]
        uniq = np.unique(rank_keys)
        per_rank.append(len(uniq))
        batches.append(np.searchsorted(uniq, rank_keys))
        positions.append(r * batch_size + (e[r][keep] % batch_size))
        samples.append(flat[r][keep])
    n = min(per_rank) if per_rank else 0
    batch = np.concatenate(batches) if batches else np.zeros(0, np.int64)
    pos = np.concatenate(positions) if positions else np.zeros(0, np.int64)
    smp = np.concatenate(samples) if samples else np.zeros(0, np.int64)
    keep = batch < n
    batch, pos, smp = batch[keep], pos[keep], smp[keep]
    order = np.lexsort((pos, batch))
    return batch[order], pos[order].astype(np.int32), smp[order]


def epoch_batches(
    plan: Plan,
    world: World,
    epoch: int,
    sample_in_epoch: int = 0,
    initial_physical_nodes: int | None = None,
) -> list[list[np.ndarray]]:
    """Per rank (node-major), the batches its DataLoader yields in this epoch."""
    ids = epoch_partition(plan, world, epoch, sample_in_epoch, initial_physical_nodes)
    return [
        loader_batches(ids[node, local], plan.batch_size, plan.drop_last)
        for node in range(world.num_nodes)
        for local in range(world.ranks_per_node)
    ]
