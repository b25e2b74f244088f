"""A rank's samples from one source, and the interleaved mix of several, as torchtitan 0.3.0
makes them (torchtitan/hf_datasets/text_datasets.py, hf_datasets/interleaved.py).

`HuggingFaceTextDataset.__iter__` (text_datasets.py:129-171) appends each document's
`tokens[:-1]` to one token buffer (tokens = encode(text, add_bos=True, add_eos=True), so the
document's input tokens are its first n-1 ids) and cuts a sample every `seq_len` tokens; the
buffer carries over from one epoch to the next (`reloop` keeps it, :173-187). So a rank's samples
from a source are consecutive seq_len-token windows over the concatenation of its documents'
input tokens, epoch after epoch: sample k covers tokens [base + k*S, base + (k+1)*S), where base
is where the stream started (0, or a resumed state's position minus its buffer).

Token ranges in the replay table are in the document's encoded ids (BOS first): a segment
`token_start..token_end` is `ids[token_start:token_end]` of the sample's input, and its labels are
`ids[token_start + 1:token_end + 1]` (the labels buffer is tokens[1:], :143).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import polars as pl

from dataloaders.errors import ForensicsError

SEGMENT_SCHEMA = {
    "k": pl.Int64,
    "doc_id": pl.Int64,
    "token_start": pl.Int64,
    "token_end": pl.Int64,
}


@dataclass
class PackedStream:
    """One rank's documents of one source, in the order it read them (epochs back to back).

    docs        int64[n]  doc ids (the source's row numbers) in read order
    inputs      int64[n]  input tokens each adds to the buffer (len(ids) - 1, at least 0)
    epoch_ends  int64[e]  stream token offset at the end of each epoch
    base        token offset of sample 0 (a resumed buffer's first token)
    seq_len     tokens per sample
    """

    docs: np.ndarray
    inputs: np.ndarray
    epoch_ends: np.ndarray
    base: int
    seq_len: int

    @property
    def offsets(self) -> np.ndarray:
        """Stream token offset where each document starts (plus the end)."""
        return np.concatenate([[0], np.cumsum(self.inputs)]).astype(np.int64)

    def samples_in_epochs(self, last_epoch: int) -> int:
        """Samples whose last token lies within epochs 0..last_epoch (a finite source's
        generator ends there, :168-170)."""
        if last_epoch >= len(self.epoch_ends):
            raise ForensicsError(
                f"the replay built {len(self.epoch_ends)} epochs of a source and was asked for "
                f"epoch {last_epoch}: a source re-looped more often than its tokens explain"
            )
        end = int(self.epoch_ends[last_epoch])
        return max((end - self.base) // self.seq_len, 0)

    def epoch_of_sample(self, k: int) -> int:
        """The epoch in which sample k is completed (its last token read)."""
        last = self.base + (k + 1) * self.seq_len
        return int(np.searchsorted(self.epoch_ends, last, side="left"))

    def segments(self, ks: np.ndarray) -> pl.DataFrame:
        """Rows (k, doc_id, token_start, token_end) of samples `ks`, in sample order then
        document order (the token range is in the document's encoded ids)."""
        ks = np.unique(np.asarray(ks, dtype=np.int64))
        if not len(ks):
            return pl.DataFrame(schema=SEGMENT_SCHEMA)
        offsets = self.offsets
        lo = self.base + ks * self.seq_len
        hi = lo + self.seq_len
        first = np.searchsorted(offsets, lo, side="right") - 1  # doc holding token lo
        last = np.searchsorted(offsets, hi - 1, side="right") - 1  # doc holding token hi-1
        count = last - first + 1
        rep_k = np.repeat(ks, count)
        step = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
        doc_pos = np.repeat(first, count) + step
        start = offsets[doc_pos]
        seg_lo = np.maximum(np.repeat(lo, count), start)
        seg_hi = np.minimum(np.repeat(hi, count), offsets[doc_pos + 1])
        keep = seg_hi > seg_lo  # documents with no input tokens add nothing
        return pl.DataFrame(
            {
                "k": rep_k[keep],
                "doc_id": self.docs[doc_pos[keep]],
                "token_start": (seg_lo - start)[keep],
                "token_end": (seg_hi - start)[keep],
            },
            schema=SEGMENT_SCHEMA,
        )


@dataclass
class Cursor:
    """Where a source's stream stands on one rank: the next sample to yield, and the epoch the
    source is in (a finite source ends with it)."""

    k: int
    epoch: int


def single_source(stream: PackedStream, cursor: Cursor, n: int, infinite: bool) -> np.ndarray:
    """The next up to n samples (their k) of a HuggingFaceTextDataLoader's only source."""
    stop = cursor.k + n
    if not infinite:
        stop = min(stop, stream.samples_in_epochs(cursor.epoch))
    return np.arange(cursor.k, max(stop, cursor.k), dtype=np.int64)


def interleave(
    streams: list[PackedStream],
    cursors: list[Cursor],
    probs: list[float],
    rng_state: tuple | None,
    seed: int,
    n: int,
    *,
    infinite: bool,
    all_exhausted: bool,
) -> tuple[list[tuple[int, int]], tuple]:
    """`InterleavedDataset.__iter__` (interleaved.py:109-134) for up to n samples: each draw
    `rng.choices(indices, weights=probs)` picks a source; a finite source that has no sample
    left ends the iteration (on_first_exhausted) or is re-looped (all_exhausted, :125-134).
    Returns [(source, k)] and the RNG state after the last draw."""
    rng = random.Random(seed)
    if rng_state is not None:
        rng.setstate(rng_state)
    indices = list(range(len(streams)))
    exhausted = [False] * len(streams)
    out: list[tuple[int, int]] = []
    while len(out) < n:
        idx = rng.choices(indices, weights=probs, k=1)[0]
        cursor = cursors[idx]
        if infinite or cursor.k < streams[idx].samples_in_epochs(cursor.epoch):
            out.append((idx, cursor.k))
            cursor.k += 1
            continue
        if not all_exhausted:
            break
        exhausted[idx] = True
        if all(exhausted):
            break
        cursor.epoch += 1  # reloop(): the next epoch, the buffer kept (text_datasets.py:173)
    return out, rng.getstate()
