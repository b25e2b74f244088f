"""GPTDataset's three index arrays, rebuilt exactly as megatron-core 0.16.x builds them.

A GPTDataset turns one split of a `.bin/.idx` dataset into `num_samples` training samples of
`seq_length` (+1 extra) tokens. Megatron (gpt_dataset.py `_build_document_sample_shuffle_indices`,
helpers.cpp `build_sample_idx`) builds, with one `numpy.random.RandomState(seed)`:

    document_index  int32[E * D]   the split's document (sequence) ids, repeated for E epochs and
                                   shuffled; when the final epoch is separate, the first E-1 epochs
                                   are shuffled together and the last epoch on its own, then
                                   concatenated.
    sample_index    int32|int64[n + 1, 2]
                                   (position in document_index, token offset in that document)
                                   where sample k starts; sample k ends where k+1 starts (plus the
                                   extra token). n = (E * T - extra) // L.
    shuffle_index   uint32|int64[n]
                                   a permutation of [0, n): dataset sample i is sample_index row
                                   shuffle_index[i]; with a separate final epoch, [0, sans) and
                                   [sans, n) are permuted separately.

`build_sample_idx` is a C++ loop in Megatron; here it is a closed form. Every sample advances the
flattened token stream by exactly L tokens (the extra token is shared with the next sample), so
sample k (k >= 1) starts at stream position k*L. The loop leaves a document only when the tokens
still needed *exceed* what it has left, so the start document is the one whose cumulative end C is
the first with C >= k*L + extra (searchsorted, side="left"), and the offset is k*L minus that
document's start. Row 0 is always (0, 0).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from dataloaders.errors import ForensicsError
from dataloaders.lazy_jit import have_numba, kernel
from dataloaders.megatron.legacy_shuffle import legacy_shuffle

SEPARATE_FINAL_EPOCH_THRESHOLD = 0.80  # gpt_dataset.py `threshold`


def parse_split(split: str) -> list[float]:
    """Megatron's `parse_and_normalize_split`: "969,30,1" -> [0.969, 0.03, 0.001]."""
    parts = [float(p) for p in re.findall(r"[.0-9]+", split)]
    parts += [0.0] * (3 - len(parts))
    if len(parts) != 3 or any(p < 0 for p in parts):
        raise ForensicsError(f"split {split!r}: expected up to three non-negative numbers")
    vec = np.array(parts, dtype=np.float64)
    return (vec / np.sum(vec)).tolist()


def split_matrix(split: str) -> list[tuple[float, float] | None]:
    """Megatron's `convert_split_vector_to_split_matrix` for one vector: book-ends per split."""
    vector = parse_split(split)
    expansion = [0.0]
    for v in vector:
        expansion.append(expansion[-1] + v)
    matrix: list[tuple[float, float] | None] = []
    for beg, end in zip(expansion[:-1], expansion[1:], strict=True):
        matrix.append(None if end <= beg else (beg, end))
    return matrix


def split_range(split: str, num_elements: int, index: int = 0) -> tuple[int, int] | None:
    """[beg, end) of the split `index` (0 train) over `num_elements` sequences, or None."""
    bookends = split_matrix(split)[index]
    if bookends is None:
        return None
    beg = int(round(bookends[0] * float(num_elements)))
    end = int(round(bookends[1] * float(num_elements)))
    return beg, end


def num_epochs_for(
    tokens_per_epoch: int, num_samples: int | None, seq_length: int, extra: int
) -> int:
    """Smallest E with E*T >= num_samples*L + extra (Megatron's `_get_num_epochs`).

    Megatron loops forever when T == 0 and samples are requested; we refuse instead.
    """
    if num_samples is None:
        return 1
    requested = num_samples * seq_length + extra
    if tokens_per_epoch <= 0:
        if requested > 0:
            raise ForensicsError(
                f"the split holds no tokens but {num_samples} samples are requested "
                "(Megatron would hang in _get_num_epochs)"
            )
        return 1
    return max(1, -(-requested // tokens_per_epoch))


@dataclass(frozen=True)
class EpochPlan:
    """How many epochs a GPTDataset spans and whether the last is shuffled on its own."""

    num_epochs: int
    tokens_per_epoch: int
    separate_final_epoch: bool
    num_samples_sans_final_epoch: int  # samples in the first E-1 epochs (when separate)
    num_samples_total: int  # n = (E*T - extra) // L: rows of sample_index minus one


def plan_epochs(
    tokens_per_epoch: int, num_samples: int | None, seq_length: int, extra: int
) -> EpochPlan:
    """Megatron's epoch and separate-final-epoch decision, with its asserts."""
    epochs = num_epochs_for(tokens_per_epoch, num_samples, seq_length, extra)
    total = (epochs * tokens_per_epoch - extra) // seq_length
    if epochs == 1 or num_samples is None:
        return EpochPlan(epochs, tokens_per_epoch, False, 0, total)
    sans = ((epochs - 1) * tokens_per_epoch - extra) // seq_length
    from_final = num_samples - sans
    per_epoch = (tokens_per_epoch - extra) // seq_length
    assert 0 <= from_final <= per_epoch + 1, "megatron-core asserts this"
    separate = from_final < int(SEPARATE_FINAL_EPOCH_THRESHOLD * per_epoch)
    return EpochPlan(epochs, tokens_per_epoch, separate, sans, total)


def build_document_index(
    documents: np.ndarray, num_epochs: int, rng: np.random.RandomState, separate_final_epoch: bool
) -> np.ndarray:
    """int32[E * D]: the split's documents repeated per epoch, shuffled with `rng`.

    Consumes the RandomState exactly as Megatron's `_build_document_index` (one shuffle, or two
    when the final epoch is separate); the shuffle is numpy's, compiled (legacy_shuffle.py).
    """
    if not separate_final_epoch or num_epochs == 1:
        index = np.tile(np.asarray(documents, dtype=np.int32), num_epochs)
        legacy_shuffle(rng, index)
        return index
    first = build_document_index(documents, num_epochs - 1, rng, False)
    last = build_document_index(documents, 1, rng, False)
    return np.concatenate((first, last))


def build_shuffle_index(
    num_samples: int, total_size: int, rng: np.random.RandomState
) -> np.ndarray:
    """uint32[total] (int64 when huge): [0, num_samples) and [num_samples, total) each permuted."""
    dtype = np.uint32 if total_size < np.iinfo(np.uint32).max - 1 else np.int64
    first = np.arange(0, num_samples, dtype=dtype)
    legacy_shuffle(rng, first)
    if num_samples == total_size:
        return first
    last = np.arange(num_samples, total_size, dtype=dtype)
    legacy_shuffle(rng, last)
    return np.concatenate((first, last))


def sample_index_dtype(document_index_len: int, max_sequence_length: int) -> type[np.integer]:
    """int32 unless positions or offsets could overflow it (helpers.py `build_sample_idx`)."""
    if max(document_index_len, max_sequence_length) <= np.iinfo(np.int32).max:
        return np.int32
    return np.int64


def _running_ends(sizes: np.ndarray, document_index: np.ndarray, out: np.ndarray) -> None:
    """out[p + 1] = out[p] + sizes[document_index[p]]: one pass, gather and sum fused."""
    total = 0
    out[0] = 0
    for p in range(document_index.shape[0]):
        total += sizes[document_index[p]]
        out[p + 1] = total


# numba compiles the running token sums (on first use); numpy's gather + cumsum is the fallback.
if have_numba():
    _running_ends = kernel(cache=True, nogil=True)(_running_ends)


def document_ends(sizes: np.ndarray, document_index: np.ndarray) -> np.ndarray:
    """int64[len(document_index) + 1]: C[p] = tokens before position p of the document index.

    One compiled pass that releases the GIL: the random reads of `sizes` dominate, and fusing
    the gather with the running sum halves them against numpy's gather-then-cumsum.
    """
    ends = np.empty(len(document_index) + 1, dtype=np.int64)
    if not have_numba():  # pragma: no cover - numba is a declared dependency
        ends[0] = 0
        ends[1:] = np.asarray(sizes)[document_index]
        np.cumsum(ends[1:], out=ends[1:])
        return ends
    _running_ends(np.asarray(sizes), np.asarray(document_index), ends)
    return ends


def sample_starts(
    ends: np.ndarray,
    samples: np.ndarray,
    seq_length: int,
    extra: int,
    sizes: np.ndarray | None = None,
    document_index: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(position, offset) rows of sample_index for the given sample numbers (0..n), vectorised.

    `ends` is `document_ends(...)`. The closed form of helpers.cpp `build_sample_idx` with
    drop_last_partial_sequence=True (the train split): see the module docstring. A start past the
    last token (possible only without drop-last) follows the C++ break: last document, offset
    size - extra.
    """
    k = np.asarray(samples, dtype=np.int64)
    start = k * seq_length
    targets = start + extra
    if len(k) > 1 and not np.all(k[1:] >= k[:-1]):
        # Sorted queries walk `ends` in order (cache-friendly): ~8x faster than random ones.
        order = np.argsort(k, kind="stable")
        pos = np.empty(len(k), dtype=np.int64)
        pos[order] = np.searchsorted(ends, targets[order], side="left") - 1
    else:
        pos = np.searchsorted(ends, targets, side="left") - 1
    last = len(ends) - 2
    overflow = pos > last
    pos = np.minimum(pos, last)
    off = start - ends[np.maximum(pos, 0)]
    if overflow.any():
        assert sizes is not None and document_index is not None
        off[overflow] = int(sizes[document_index[last]]) - extra
    zero = k == 0
    pos[zero] = 0
    off[zero] = 0
    return pos, off


def build_sample_index(
    sizes: np.ndarray,
    document_index: np.ndarray,
    seq_length: int,
    num_samples_total: int,
    extra: int,
) -> np.ndarray:
    """The full sample_index [n + 1, 2], identical (values and dtype) to Megatron's."""
    ends = document_ends(sizes, document_index)
    pos, off = sample_starts(ends, np.arange(num_samples_total + 1), seq_length, extra)
    dtype = sample_index_dtype(len(document_index), int(sizes.max()) if len(sizes) else 0)
    out = np.empty((num_samples_total + 1, 2), dtype=dtype)
    out[:, 0] = pos
    out[:, 1] = off
    return out


@dataclass
class GPTIndices:
    """The three arrays of one GPTDataset (memory-mapped when they came from a cache)."""

    document_index: np.ndarray
    sample_index: np.ndarray
    shuffle_index: np.ndarray

    def __len__(self) -> int:
        """Samples in the dataset (Megatron's `len(GPTDataset)`)."""
        return int(self.sample_index.shape[0]) - 1


def build_gpt_indices(
    sizes: np.ndarray,
    documents: np.ndarray,
    num_samples: int | None,
    seq_length: int,
    seed: int,
    extra: int = 1,
) -> GPTIndices:
    """All three arrays for a GPTDataset over `documents` (the split's sequence ids).

    `sizes` is the dataset's int32 sequence_lengths; `documents` = arange(beg, end).
    """
    if seq_length <= 1:
        raise ForensicsError(f"seq_length must be > 1 (Megatron asserts it), got {seq_length}")
    tokens = int(np.sum(sizes[documents], dtype=np.int64))
    plan = plan_epochs(tokens, num_samples, seq_length, extra)
    rng = np.random.RandomState(seed)
    document_index = build_document_index(
        documents, plan.num_epochs, rng, plan.separate_final_epoch
    )
    sample_index = build_sample_index(
        sizes, document_index, seq_length, plan.num_samples_total, extra
    )
    n = sample_index.shape[0] - 1
    first = plan.num_samples_sans_final_epoch if plan.separate_final_epoch else n
    shuffle_index = build_shuffle_index(first, n, rng)
    return GPTIndices(document_index, sample_index, shuffle_index)
