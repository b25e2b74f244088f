"""The compiled shuffle against numpy's own `RandomState.shuffle`: same permutation, same state.

numpy/numpy 1f90bbb5, numpy/random/mtrand.pyx:4622-4642 (the 1-D fast path) and 4685-4692
(`_shuffle_raw`), distributions.c:1085-1110 (`random_interval`).
"""

from __future__ import annotations

import numpy as np
import pytest

from dataloaders.megatron.legacy_shuffle import legacy_shuffle


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64])
@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 17, 1000, 65_536, 65_537, 300_001])
@pytest.mark.parametrize("seed", [0, 1234, 2**32 - 1])
def test_same_permutation_and_state_as_numpy(dtype, n: int, seed: int) -> None:
    theirs = np.arange(n, dtype=dtype)
    ours = theirs.copy()
    numpy_rng, our_rng = np.random.RandomState(seed), np.random.RandomState(seed)
    numpy_rng.shuffle(theirs)
    legacy_shuffle(our_rng, ours)
    assert np.array_equal(ours, theirs)
    # The generator continues identically: Megatron draws its sample shuffle from it next.
    assert np.array_equal(numpy_rng.randint(0, 2**31, size=8), our_rng.randint(0, 2**31, size=8))


def test_repeated_values_and_two_shuffles_in_a_row() -> None:
    """Megatron's document index: documents tiled over epochs, then a second shuffle."""
    docs = np.arange(5_000, dtype=np.int32)
    theirs, ours = np.tile(docs, 7), np.tile(docs, 7)
    numpy_rng, our_rng = np.random.RandomState(7), np.random.RandomState(7)
    numpy_rng.shuffle(theirs)
    legacy_shuffle(our_rng, ours)
    second_theirs = np.arange(9_999, dtype=np.uint32)
    second_ours = second_theirs.copy()
    numpy_rng.shuffle(second_theirs)
    legacy_shuffle(our_rng, second_ours)
    assert np.array_equal(ours, theirs)
    assert np.array_equal(second_ours, second_theirs)


def test_a_strided_view_is_shuffled_like_numpy() -> None:
    base = np.arange(2_000, dtype=np.int32)
    theirs, ours = base.copy()[::2], base.copy()[::2]
    np.random.RandomState(3).shuffle(theirs)
    legacy_shuffle(np.random.RandomState(3), ours)
    assert np.array_equal(ours, theirs)
