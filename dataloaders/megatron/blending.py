"""BlendedDataset sizing and its two index arrays, exactly as megatron-core 0.16.x builds them.

A blend of K GPTDatasets with weights w serves `size` samples. Megatron (blended_dataset.py,
helpers.cpp `build_blending_indices`, blended_megatron_dataset_builder.py) builds:

    dataset_index         int16[size]  which dataset serves blended sample i
    dataset_sample_index  int64[size]  which sample of that dataset (its running count)

The loop is greedy and has no randomness: for sample i, with x = max(i, 1) in double precision,
it picks the first k maximising `w_k * x - count_k` (strict >). Each choice depends on all
previous counts, so there is no exact vectorised form in general (ties and float rounding decide
real choices); it runs compiled with numba, only up to the last sample a replay needs: sample i's
choice depends on samples < i only, so a prefix of the arrays is exactly Megatron's prefix.

Sizes: with weights given, the builder normalises them (float64), asks each GPTDataset for
`ceil(ceil(N * w_k) * (1 + surplus))` samples and builds the blend with `size = sum_k
ceil(N * w_k)` (>= N); BlendedDataset normalises the weights a second time before the loop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dataloaders.lazy_jit import have_numba, kernel


def normalize(weights: Sequence[float]) -> list[float]:
    """Megatron's `utils.normalize`: float64 division by the sum, back to Python floats."""
    w = np.array(weights, dtype=np.float64)
    return (w / np.sum(w)).tolist()


def sizes_per_dataset(
    normalized_weights: Sequence[float], target_size: int, surplus: float = 0.0
) -> list[int]:
    """`_get_size_per_split_per_dataset` for one split: samples to request per dataset."""
    return [
        int(math.ceil(math.ceil(target_size * weight) * (1 + surplus)))
        for weight in normalized_weights
    ]


def _blend_loop(weights: np.ndarray, counts: np.ndarray, start: int, stop: int, out_ds, out_dsi):
    """helpers.cpp `build_blending_indices`, samples start..stop-1, continuing from `counts`."""
    num = weights.shape[0]
    for sample_idx in range(start, stop):
        x = max(float(sample_idx), 1.0)
        best = 0
        best_err = weights[0] * x - float(counts[0])
        for k in range(1, num):
            err = weights[k] * x - float(counts[k])
            if err > best_err:
                best_err = err
                best = k
        out_ds[sample_idx - start] = best
        out_dsi[sample_idx - start] = counts[best]
        counts[best] += 1


# numba compiles the greedy loop (on first use); the pure-Python fallback is exact but slow.
_blend_loop_compiled = kernel(cache=True, nogil=True)(_blend_loop) if have_numba() else None


def build_blending_indices(
    weights: Sequence[float], size: int, stop: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(dataset_index int16[m], dataset_sample_index int64[m]) for samples [0, m), m = min(stop,
    size): exactly the first m entries of Megatron's arrays. `weights` as BlendedDataset holds
    them (already normalised twice, see `blend_weights`)."""
    m = size if stop is None else min(stop, size)
    w = np.asarray(weights, dtype=np.float64)
    counts = np.zeros(len(w), dtype=np.int64)
    dataset_index = np.zeros(m, dtype=np.int16)
    dataset_sample_index = np.zeros(m, dtype=np.int64)
    loop = _blend_loop_compiled or _blend_loop
    loop(w, counts, 0, m, dataset_index, dataset_sample_index)
    return dataset_index, dataset_sample_index


def blend_weights(weights: Sequence[float]) -> list[float]:
    """The weights the greedy loop sees: normalised by the builder, then again by BlendedDataset."""
    return normalize(normalize(weights))
