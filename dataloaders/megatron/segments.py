"""Samples -> document segments, in one compiled pass per dataset.

A GPTDataset sample row j spans document_index positions sample_index[j, 0] ..
sample_index[j + 1, 0], from token offset sample_index[j, 1] in the first to
sample_index[j + 1, 1] (+ the extra token) in the last (megatron-core gpt_dataset.py
`_query_document_sample_shuffle_indices`). Each position is one segment of the replay table.

The replayer first sizes every sample (`pe - pb + 1` segments), so each sample's first segment
has a known place in the replay-ordered output; `fill_segments` then writes one dataset's
samples straight into those places. No per-dataset part is concatenated and re-sorted, and the
only random reads are the ones the table needs (document_index at each position, the sizes of
the documents a sample ends inside).
"""

from __future__ import annotations

import numpy as np

from dataloaders.lazy_jit import have_numba, kernel


def _fill(
    pb: np.ndarray,
    ob: np.ndarray,
    pe: np.ndarray,
    oe: np.ndarray,
    out_at: np.ndarray,
    document_index: np.ndarray,
    sizes: np.ndarray,
    extra: int,
    sequence: np.ndarray,
    token_start: np.ndarray,
    token_end: np.ndarray,
) -> None:
    """Sample i's segments at out_at[i] ...: the sequence id at each position, and the tokens
    [start, end) of that sequence the sample holds (all of it but at the sample's two ends)."""
    for i in range(pb.shape[0]):
        o = out_at[i]
        for p in range(pb[i], pe[i] + 1):
            seq = document_index[p]
            sequence[o] = seq
            token_start[o] = ob[i] if p == pb[i] else 0
            token_end[o] = oe[i] + extra if p == pe[i] else sizes[seq]
            o += 1


if have_numba():  # numba compiles the fill (on first use); the numpy version below is the fallback
    _fill = kernel(cache=True, nogil=True)(_fill)


def _spans(
    shuffle_index: np.ndarray, sample_index: np.ndarray, dsi: np.ndarray, out: np.ndarray
) -> None:
    """out[:, i] = (pb, ob, pe, oe) of dataset sample dsi[i]: rows j and j + 1 of
    sample_index, j = shuffle_index[dsi[i]], read together (one random access, not two)."""
    for i in range(dsi.shape[0]):
        j = shuffle_index[dsi[i]]
        out[0, i] = sample_index[j, 0]
        out[1, i] = sample_index[j, 1]
        out[2, i] = sample_index[j + 1, 0]
        out[3, i] = sample_index[j + 1, 1]


if have_numba():  # compiled like _fill; sample_spans has the numpy fallback
    _spans = kernel(cache=True, nogil=True)(_spans)


def sample_spans(
    shuffle_index: np.ndarray, sample_index: np.ndarray, dsi: np.ndarray
) -> np.ndarray:
    """int64[4, len(dsi)]: each dataset sample's first (position, offset) in document_index
    and the next sample's, from the stored shuffle and sample indices."""
    out = np.empty((4, len(dsi)), dtype=np.int64)
    if not have_numba():  # pragma: no cover - numba is a declared dependency
        j = np.asarray(shuffle_index[dsi], dtype=np.int64)
        out[:2] = np.asarray(sample_index[j], dtype=np.int64).T
        out[2:] = np.asarray(sample_index[j + 1], dtype=np.int64).T
        return out
    _spans(np.asarray(shuffle_index), np.asarray(sample_index), np.asarray(dsi, np.int64), out)
    return out


def fill_segments(
    pb: np.ndarray,
    ob: np.ndarray,
    pe: np.ndarray,
    oe: np.ndarray,
    out_at: np.ndarray,
    document_index: np.ndarray,
    sizes: np.ndarray,
    extra: int,
    out: dict[str, np.ndarray],
) -> None:
    """Write one dataset's samples into `out` ("sequence", "token_start", "token_end", int64
    arrays over the whole table). pb/ob, pe/oe: each sample's first and last (position,
    offset), int64; out_at: int64 place of each sample's first segment."""
    if have_numba():
        _fill(pb, ob, pe, oe, out_at, np.asarray(document_index), np.asarray(sizes), extra,
              out["sequence"], out["token_start"], out["token_end"])  # fmt: skip
        return
    nseg = pe - pb + 1  # pragma: no cover - numba is a declared dependency
    first = np.repeat(pb, nseg)
    step = np.arange(int(nseg.sum())) - np.repeat(np.cumsum(nseg) - nseg, nseg)
    at = np.repeat(out_at, nseg) + step
    pos = first + step
    seq = np.asarray(document_index[pos], dtype=np.int64)
    out["sequence"][at] = seq
    out["token_start"][at] = np.where(step == 0, np.repeat(ob, nseg), 0)
    last = pos == np.repeat(pe, nseg)
    out["token_end"][at] = np.where(last, np.repeat(oe, nseg) + extra, np.asarray(sizes)[seq])
