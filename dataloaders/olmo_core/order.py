"""OLMo-core's data order: the global indices of an epoch, its batches and the rank slicing.

From olmo_core/data/data_loader.py (`NumpyFSLDataLoader`, identical in allenai/OLMo-core
fa6c5014 and the ai2-olmo-core 3.0.0 wheel):

- `_build_global_indices`: `np.random.Generator(np.random.PCG64(seed + epoch))` (utils.get_rng)
  shuffles `arange(len(dataset), dtype=uint32)` in place; with `chunk_size` c > 1 (set to
  max_target_sequence_length // sequence_length by `wrap_numpy_dataset`) the permutation is of
  chunk numbers and each chunk expands to its c consecutive instances. `shuffle: false` keeps
  arange. Epochs are 1-based; the trainer reshuffles with `epoch` before each one.
- the run saves them as `<work_dir>/global_indices_chunk{c}_dataset_size{n}_epoch{e}_seed{s}_v1.npy`
  (fields sorted by name, chunk only when > 1, seed/epoch only when shuffling; raw uint32).
- `_get_local_instance_indices`: the first `total_size = ipb * (n // ipb)` indices reshaped to
  (batches, ipb) rows, batch b = row b; DP rank r takes columns r, r + W, r + 2W ...
- the trainer's step counter is 1-based and continues across epochs: step i is batch
  (i - 1) % batches_per_epoch of epoch (i - 1) // batches_per_epoch + 1.

Position convention (as the other families): rank r's j-th instance sits at global position
r * (ipb / W) + j, i.e. position p holds column (p % per_rank) * W + p // per_rank of the row.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dataloaders.errors import ForensicsError


def global_indices_name(
    *, seed: int, epoch: int, dataset_size: int, chunk: int, shuffle: bool = True
) -> str:
    """File name OLMo-core saves an epoch's global indices under (`_global_indices_file`)."""
    fields = {
        "seed": seed if shuffle else None,
        "epoch": epoch if shuffle else None,
        "dataset_size": dataset_size,
        "chunk": chunk if chunk > 1 else None,
        "v": 1,
    }
    parts = ["global_indices"] + [
        f"{k}{fields[k]}" for k in sorted(fields) if fields[k] is not None
    ]
    return "_".join(parts) + ".npy"


def build_global_indices(
    dataset_size: int, *, seed: int, epoch: int, chunk: int = 1, shuffle: bool = True
) -> np.ndarray:
    """The epoch's permutation of instances, as NumpyFSLDataLoader._build_global_indices."""
    rng = np.random.Generator(np.random.PCG64(seed=seed + epoch)) if shuffle else None
    if chunk == 1:
        indices = np.arange(dataset_size, dtype=np.uint32)
        if rng is not None:
            rng.shuffle(indices)
        return indices
    chunks = np.arange(dataset_size // chunk, dtype=np.uint32)
    if rng is not None:
        rng.shuffle(chunks)
    indices = np.repeat(chunks * chunk, chunk).reshape(-1, chunk) + np.arange(chunk).reshape(1, -1)
    return indices.reshape(-1)


def saved_global_indices(path: Path, dataset_size: int) -> np.ndarray:
    """A run's saved global indices file; a wrong length is a one-line error."""
    size = path.stat().st_size
    if size != dataset_size * 4:
        raise ForensicsError(
            f"{path}: {size} bytes, expected {dataset_size * 4} ({dataset_size} uint32 indices)"
        )
    return np.fromfile(path, dtype=np.uint32)


def position_columns(instances_per_batch: int, world_size: int) -> np.ndarray:
    """For each global position p, the column of the global-indices row it holds."""
    per_rank = instances_per_batch // world_size
    p = np.arange(instances_per_batch)
    return (p % per_rank) * world_size + p // per_rank


def step_location(iterations: np.ndarray, batches_per_epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """(epoch 1-based, batch index in the epoch) of 1-based trainer steps."""
    zero = np.asarray(iterations, dtype=np.int64) - 1
    return zero // batches_per_epoch + 1, zero % batches_per_epoch
