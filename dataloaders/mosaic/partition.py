"""StreamingDataset's partition of an epoch over nodes, ranks, DataLoader workers and batches,
transcribed from mosaicml-streaming 0.13.0 (see shuffle.py for why a transcription and which
commit). streaming/base/partition/{__init__,orig,relaxed}.py.

The result of `get_partitions`:
    ids  int64[nodes, ranks_per_node, workers_per_rank, batches_per_worker, batch_size]
         position in the epoch's (shuffled) sample order, -1 = padding (yields nothing)
A rank's DataLoader worker w iterates ids[node, rank_of_node, w].flatten(), skipping -1
(dataset.py:1055 and dataset.py:1430-1473).
"""

from __future__ import annotations

import math
import warnings

import numpy as np


def get_partitions(
    algo: str,
    num_samples: int,
    num_canonical_nodes: int,
    num_physical_nodes: int,
    ranks_per_node: int,
    workers_per_rank: int,
    batch_size: int,
    drop_first: int = 0,
    initial_physical_nodes: int | None = None,
) -> np.ndarray:
    """partition/__init__.py:23-68: dispatch to orig or relaxed."""
    world_size = ranks_per_node * num_physical_nodes
    num_repeated = world_size - (num_samples % world_size)
    if num_samples + num_repeated < drop_first:
        raise ValueError(
            f"resuming further into the epoch ({drop_first}) than it has samples ({num_samples})"
        )
    if algo == "orig":
        return get_partitions_orig(
            num_samples,
            num_canonical_nodes,
            num_physical_nodes,
            ranks_per_node,
            workers_per_rank,
            batch_size,
            drop_first,
        )
    return get_partitions_relaxed(
        num_samples,
        num_canonical_nodes,
        num_physical_nodes,
        ranks_per_node,
        workers_per_rank,
        batch_size,
        drop_first,
        initial_physical_nodes,
    )


def get_partitions_orig(
    num_samples: int,
    num_canonical_nodes: int,
    num_physical_nodes: int,
    ranks_per_node: int,
    workers_per_rank: int,
    batch_size: int,
    drop_first: int = 0,
) -> np.ndarray:
    """partition/orig.py:17-175.

    Longer than our 80-line limit on purpose: a line-by-line transcription of the library's one
    function, kept in its order so it can be diffed against the source when streaming changes;
    splitting it would make that check harder, not the code clearer.
    """
    if num_canonical_nodes < num_physical_nodes:
        if num_physical_nodes % num_canonical_nodes:
            raise ValueError("canonical and physical node counts must divide one another")
    elif num_physical_nodes < num_canonical_nodes:
        if num_canonical_nodes % num_physical_nodes:
            raise ValueError("canonical and physical node counts must divide one another")

    # drop_first is rounded down to a multiple of the physical nodes (orig.py:59-64).
    drop_first -= drop_first % num_physical_nodes

    # Sample ranges per canonical node, padded so physical nodes split them evenly.
    per_cn = (num_samples + num_canonical_nodes - 1) // num_canonical_nodes
    node_ratio = 0
    padding = 0
    if num_canonical_nodes < num_physical_nodes:
        node_ratio = num_physical_nodes // num_canonical_nodes
        overflow = per_cn % node_ratio
        if overflow:
            padding = node_ratio - overflow
    padded_per_cn = per_cn + padding

    if num_samples > num_canonical_nodes or (
        num_samples == num_canonical_nodes and num_canonical_nodes >= num_physical_nodes
    ):
        # ids: (canonical nodes, padded samples per canonical node) (orig.py:86-117)
        ids = np.arange(num_canonical_nodes * padded_per_cn, dtype=np.int64)
        ids = ids.reshape(num_canonical_nodes, padded_per_cn)
        row_offsets = np.expand_dims(np.arange(num_canonical_nodes) * padding, 1)
        ids -= row_offsets
        row_starts = np.expand_dims(
            np.arange(num_canonical_nodes) * num_samples // num_canonical_nodes, 1
        )
        ids += row_starts - ids[:, :1]
        row_stops = np.expand_dims(
            np.arange(1, 1 + num_canonical_nodes) * num_samples // num_canonical_nodes, 1
        )
        are_rows_short = row_stops - row_starts < per_cn
        ids[:, per_cn - 1 : per_cn] -= are_rows_short
        if padding:
            ids[:, -padding:] = ids[
                :, -padding - node_ratio + 1 - padding : -padding - node_ratio + 1
            ]
    else:
        warnings.warn(
            f"partitioning {num_samples} samples over {num_canonical_nodes} canonical nodes "
            "repeats many samples (as streaming warns)",
            stacklevel=2,
        )
        total_needed = num_canonical_nodes * padded_per_cn
        current = np.arange(num_samples, dtype=np.int64)
        ids = np.concatenate(
            [np.tile(current, total_needed // num_samples), current[: total_needed % num_samples]]
        )
        ids = ids.reshape(num_canonical_nodes, padded_per_cn)

    # ids: (physical nodes, samples per node), after dropping samples already seen
    # (orig.py:132-138).
    ids = ids.transpose().flatten()[drop_first:]
    ids = ids.reshape(-1, num_physical_nodes).transpose()

    # Interleave each node's samples over its ranks, repeating samples to even them out
    # (orig.py:140-163). ids: (physical nodes, samples per rank, ranks per node)
    overflow = ids.shape[1] % ranks_per_node
    if overflow:
        underflow = ranks_per_node - overflow
        if ranks_per_node + underflow - 1 <= ids.shape[1]:
            last = ids[:, -ranks_per_node - underflow + 1 : -ranks_per_node + 1]
        else:
            warnings.warn("fewer samples per node than ranks: many repeats", stacklevel=2)
            n = ids.shape[1]
            last = np.concatenate([np.tile(ids, underflow // n), ids[:, : underflow % n]], 1)
        ids = np.concatenate([ids, last], 1)
    ids = ids.reshape(num_physical_nodes, -1, ranks_per_node)

    # Pad with -1 to whole (workers x batch) rows, then deal batches to workers round robin
    # (orig.py:165-175). -> (nodes, ranks, workers, batches per worker, batch size)
    rounded = math.ceil(ids.shape[1] / (workers_per_rank * batch_size)) * (
        workers_per_rank * batch_size
    )
    overflow = rounded - ids.shape[1]
    if overflow:
        pad = np.full((num_physical_nodes, overflow, ranks_per_node), -1, np.int64)
        ids = np.concatenate([ids, pad], 1)
    ids = ids.transpose(0, 2, 1)
    ids = ids.reshape(num_physical_nodes, ranks_per_node, -1, workers_per_rank, batch_size)
    return ids.transpose(0, 1, 3, 2, 4)


def get_partitions_relaxed(
    num_samples: int,
    num_canonical_nodes: int,
    num_physical_nodes: int,
    ranks_per_node: int,
    workers_per_rank: int,
    batch_size: int,
    drop_first: int = 0,
    initial_physical_nodes: int | None = None,
) -> np.ndarray:
    """partition/relaxed.py:17-88: orig when the node counts divide one another (or on a first
    run); otherwise the initial run's partition re-cut for the new node count."""
    if (
        initial_physical_nodes is None
        or (
            num_physical_nodes <= num_canonical_nodes
            and num_canonical_nodes % num_physical_nodes == 0
        )
        or (
            num_physical_nodes > num_canonical_nodes
            and num_physical_nodes % num_canonical_nodes == 0
        )
    ):
        return get_partitions_orig(
            num_samples,
            num_canonical_nodes,
            num_physical_nodes,
            ranks_per_node,
            workers_per_rank,
            batch_size,
            drop_first,
        )
    global_batch_size = num_physical_nodes * ranks_per_node * batch_size
    initial_devices = initial_physical_nodes * ranks_per_node
    if global_batch_size % initial_devices:
        raise ValueError(
            f"global batch size {global_batch_size} is not divisible by the initial device "
            f"count {initial_devices} (relaxed partitioning needs a constant global batch)"
        )
    partition = get_partitions_orig(
        num_samples,
        num_canonical_nodes,
        initial_physical_nodes,
        ranks_per_node,
        workers_per_rank,
        global_batch_size // initial_devices,
        drop_first,
    )
    partition = partition.transpose(3, 2, 0, 1, 4).flatten()
    partition = partition.reshape(
        -1, workers_per_rank, num_physical_nodes, ranks_per_node, batch_size
    )
    return partition.transpose(2, 3, 1, 0, 4)
