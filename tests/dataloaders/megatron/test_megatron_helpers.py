"""The closed-form sample index and the compiled blending loop against megatron-core's C++
helpers (`build_sample_idx`, `build_blending_indices`) on many random inputs."""

from __future__ import annotations

import numpy as np
import pytest

from dataloaders.megatron.blending import blend_weights, build_blending_indices, normalize
from dataloaders.megatron.gpt_indices import build_sample_index, parse_split, split_matrix


@pytest.fixture(scope="module")
def helpers(megatron):
    from megatron.core.datasets import helpers

    return helpers


def test_sample_index_closed_form(helpers) -> None:
    """Random document sizes (zero-length documents included), lengths, epochs, extra token."""
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(400):
        n = int(rng.integers(1, 80))
        sizes = rng.integers(0, 60, n).astype(np.int32)
        sizes[rng.integers(0, n)] += 2
        seq = int(rng.integers(2, 50))
        epochs = int(rng.integers(1, 4))
        extra = int(rng.integers(0, 2))
        tokens = int(sizes.sum())
        if epochs * tokens - extra < seq:
            continue
        doc = np.tile(np.arange(n, dtype=np.int32), epochs)
        rng.shuffle(doc)
        ref = helpers.build_sample_idx(sizes, doc, seq, epochs, tokens, True, bool(extra))
        ours = build_sample_index(sizes, doc, seq, (epochs * tokens - extra) // seq, extra)
        assert ours.dtype == ref.dtype
        np.testing.assert_array_equal(ours, ref)
        checked += 1
    assert checked > 300


def test_blending_matches_on_many_weight_sets(helpers) -> None:
    rng = np.random.default_rng(1)
    for trial in range(300):
        k = int(rng.integers(1, 9))
        raw = rng.random(k) * 10.0 ** rng.integers(-3, 3)
        if trial % 3 == 0:
            raw = np.round(raw * 4) + 1  # integer weights: many exact ties
        weights = blend_weights(raw.tolist())
        size = int(rng.integers(1, 4000))
        ref_ds = np.zeros(size, np.int16)
        ref_dsi = np.zeros(size, np.int64)
        helpers.build_blending_indices(ref_ds, ref_dsi, weights, k, size, False)
        ds, dsi = build_blending_indices(weights, size)
        np.testing.assert_array_equal(ds, ref_ds)
        np.testing.assert_array_equal(dsi, ref_dsi)
        stop = size // 3
        ds_p, dsi_p = build_blending_indices(weights, size, stop)  # a prefix is exact
        np.testing.assert_array_equal(ds_p, ref_ds[:stop])
        np.testing.assert_array_equal(dsi_p, ref_dsi[:stop])


def test_split_parsing_matches_megatron(megatron) -> None:
    from megatron.core.datasets.blended_megatron_dataset_config import (
        convert_split_vector_to_split_matrix,
        parse_and_normalize_split,
    )
    from megatron.core.datasets.utils import normalize as megatron_normalize

    for split in ("969, 30, 1", "99,1,0", "80,20", "1", "0.7,0.2,0.1", "0,100,0"):
        assert parse_split(split) == parse_and_normalize_split(split)
        assert split_matrix(split) == convert_split_vector_to_split_matrix(
            parse_and_normalize_split(split)
        )
    assert normalize([0.7, 0.2, 0.1]) == megatron_normalize([0.7, 0.2, 0.1])
