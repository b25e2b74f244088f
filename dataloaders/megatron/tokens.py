"""The exact token sequences a Megatron run fed: a gather over the replay table's segments.

Why a separate module: the replay table says which document segments make up each sample
(dataset, doc_id, token_start, token_end within the document, in order); the tokens themselves are
one memory-mapped `.bin` per dataset. A sample is the concatenation of its segments, which
megatron-core's GPTDataset builds as `seq_length + add_extra_token` tokens (`tokens = sample[:-1]`,
`labels = sample[1:]`). Here that concatenation is a vectorised gather, chunked over samples so a
300-iteration x 1024-sample x 4097-token window never builds a 5-billion-entry index in memory.

No import from `forensics/`: a mismatch raises ValueError, the caller words it for the user.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from dataloaders.lazy_jit import have_numba, kernel
from dataloaders.megatron.indexed import IndexedDataset

CHUNK_TOKENS = 1 << 25  # ~33M tokens per chunk of samples (one progress step)


def _copy_runs(
    src: np.ndarray,
    src_begin: np.ndarray,
    length: np.ndarray,
    dst: np.ndarray,
    dst_begin: np.ndarray,
) -> None:
    """dst[dst_begin[i] : +length[i]] = src[src_begin[i] : +length[i]] for every segment i.

    Segments are contiguous runs of a document, so this is a memcpy per segment: no per-token
    index array (a fancy-index gather builds 8 bytes of index per 2-byte token and ran 7x slower
    than writing the same bytes, scripts/bench_rescore.py)."""
    for i in range(len(length)):
        s = src_begin[i]
        d = dst_begin[i]
        for j in range(length[i]):
            dst[d + j] = src[s + j]


def _copy_runs_python(src, src_begin, length, dst, dst_begin) -> None:  # type: ignore[no-untyped-def]
    for s, n, d in zip(src_begin.tolist(), length.tolist(), dst_begin.tolist(), strict=True):
        dst[d : d + n] = src[s : s + n]


# numba compiles the per-segment copy (on first use); the fallback slices in Python (exact, slower)
_copy_compiled = kernel(cache=True, nogil=True)(_copy_runs) if have_numba() else None


def document_starts(ds: IndexedDataset) -> np.ndarray:
    """int64[num_documents]: the token offset in `.bin` (in tokens) where each document begins.

    A document's first sequence's byte pointer divided by the token size; with
    --split-sentences a document spans several consecutive sequences, stored back to back."""
    first_seq = np.asarray(ds.document_indices[:-1], dtype=np.int64)
    return np.asarray(ds.sequence_pointers, dtype=np.int64)[first_seq] // ds.dtype.itemsize


def _source(
    ds: IndexedDataset, begins: np.ndarray, lengths: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(token array, run starts in it) for runs of `ds`: the mapped `.bin` itself, or for a
    `.bin` in object storage only the runs' tokens, fetched by ranges (storage/arrays.py)."""
    tokens = ds.tokens
    gather = getattr(tokens, "gather", None)
    if gather is None:
        return np.asarray(tokens), begins
    return gather(begins, lengths)


def sample_offsets(rows: np.ndarray, token_start: np.ndarray, token_end: np.ndarray) -> np.ndarray:
    """int64[n_segments]: where each segment begins inside its sample.

    `rows` numbers the samples 0..n-1 and must be sorted (replay order: a sample's segments are
    consecutive, in order)."""
    lengths = token_end - token_start
    cum = np.cumsum(lengths) - lengths  # segment start in the flat stream
    first = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
    sample_base = np.repeat(cum[first], np.diff(np.r_[first, len(rows)]))
    return cum - sample_base


def gather_samples(
    datasets: Mapping[str, IndexedDataset],
    names: np.ndarray,
    doc_id: np.ndarray,
    token_start: np.ndarray,
    token_end: np.ndarray,
    rows: np.ndarray,
    sample_length: int,
    out: np.ndarray | None = None,
    advance: Callable[[int], None] | None = None,
) -> np.ndarray:
    """tokens[n_samples, sample_length]: sample r = its segments' tokens, concatenated.

    Segment arrays are aligned, one entry per replay-table row, `rows` sorted (0..n-1, each
    sample's segments consecutive and in order). Every sample must add up to `sample_length`
    tokens, else ValueError (the replay table is not a full-sample one). `out` may be a
    preallocated (e.g. memory-mapped .npy) array; `advance(n)` is called per chunk of samples.
    """
    rows = np.asarray(rows, dtype=np.int64)
    start = np.asarray(token_start, dtype=np.int64)
    end = np.asarray(token_end, dtype=np.int64)
    n = int(rows[-1]) + 1 if len(rows) else 0
    per_sample = np.bincount(rows, weights=end - start, minlength=n).astype(np.int64)
    bad = np.flatnonzero(per_sample != sample_length)
    if bad.size:
        raise ValueError(
            f"sample {int(bad[0])} has {int(per_sample[bad[0]])} tokens, expected {sample_length}"
        )
    dtype = np.result_type(*[ds.dtype for ds in datasets.values()]) if datasets else np.int32
    if out is None:
        out = np.empty((n, sample_length), dtype=dtype)
    flat = out.reshape(-1)  # a view for a C-contiguous out (np.empty, an .npy memmap)
    if not np.shares_memory(flat, out):
        raise ValueError("gather_samples: `out` must be C-contiguous")
    flat_pos = rows * sample_length + sample_offsets(rows, start, end)
    # per segment: its dataset as a small integer, and where its run starts in that .bin
    keys, code = np.unique(np.asarray(names, dtype=object), return_inverse=True)
    src_pos = np.empty(len(rows), dtype=np.int64)
    for k, name in enumerate(keys):
        pick = code == k
        src_pos[pick] = document_starts(datasets[str(name)])[doc_id[pick]] + start[pick]
    length = end - start
    copy = _copy_compiled or _copy_runs_python  # compiled once per dtype pair
    per_chunk = max(1, CHUNK_TOKENS // max(1, sample_length))
    seg_bounds = np.searchsorted(rows, np.arange(0, n + per_chunk, per_chunk))
    for c in range(len(seg_bounds) - 1):
        lo, hi = int(seg_bounds[c]), int(seg_bounds[c + 1])
        if lo == hi:
            continue
        for k, name in enumerate(keys):
            pick = np.flatnonzero(code[lo:hi] == k) + lo
            if pick.size:
                tokens, begins = _source(datasets[str(name)], src_pos[pick], length[pick])
                copy(tokens, begins, length[pick], flat, flat_pos[pick])
        if advance is not None:
            advance(int(rows[hi - 1]) + 1 - int(rows[lo]))
    return out
