"""Repeated token n-grams, after OLMo 2's instance filter: a period of 1-13 tokens repeated 32 or
more times in a row (`g4ODg4OD...`, `\\n\\n\\n...`, a table border) is what OLMo 2 traced its
grad-norm spikes to, and OLMo-core drops such training instances from the loss.

Semantics are OLMo-core's, read from allenai/OLMo-core at commit
fa6c5014c9f6e9ee789da2d9c20d5126fee8df0d (identical in the ai2-olmo-core 3.0.0 wheel):

- `src/olmo_core/data/utils.py:642` `find_periodic_sequences(arr, max_period, min_period)`: for
  each period p, the array is padded (always, by 1..p values) to a multiple of p and reshaped to
  rows of p tokens; a row equal to the row before it (np.roll, so row 0 is compared with the
  padded last row) is "periodic"; each block of consecutive periodic rows is widened by the
  trailing equal positions of the row before it and the leading equal positions of the row after
  it (`find_start_last_consecutive_true`, `find_end_first_consecutive_true`, lines 608-631), and
  reported as (start, end, period, times = (end - start) // p) when times > 2.
- `src/olmo_core/data/numpy_dataset.py:100` `InstanceFilterConfig`: max period 13, min period 1,
  max count 32; `numpy_dataset.py:353` `_validate_instance`: an instance is dropped when any
  match has times >= 32.

This module computes the same matches for many token rows at once (numpy over a 2-D batch, one
pass per period) and keeps, per row, the match with the most repetitions (the smallest period
and then the first match on ties, the order OLMo-core's generator yields them in). Rows of
different lengths are padded with distinct negative values, which never equal a token or each
other, so a row's result is exactly what OLMo-core returns for that row alone (its own `-1`
padding only ever compares unequal, as ours does).
tests/forensics/score/test_scan_repeats.py runs OLMo-core's own function as the oracle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MIN_PERIOD = 1
MAX_PERIOD = 13
MAX_COUNT = 32  # an instance (or document) with a match repeated this often is flagged
BATCH_CELLS = 4_000_000  # tokens per 2-D batch: bounds the boolean arrays (~13 x this bytes)


@dataclass(frozen=True)
class Repeats:
    """The strongest periodic match of each row (all int64 [n]; times 0 when there is none).

    `times`: repetitions of the period (OLMo-core's `times`); `period`: its length in tokens;
    `start`, `end`: token positions of the repeated stretch in the row (end exclusive).
    """

    times: np.ndarray
    period: np.ndarray
    start: np.ndarray
    end: np.ndarray

    def flagged(self, max_count: int = MAX_COUNT) -> np.ndarray:
        """bool [n]: rows OLMo-core's instance filter would drop."""
        return self.times >= max_count


def _pad_batch(rows: Sequence[np.ndarray], width: int) -> np.ndarray:
    """int64 [n, width]: each row's tokens, then the distinct negatives -1, -2, ... (never equal
    to a token, nor to the value one period earlier)."""
    out = np.broadcast_to(-np.arange(1, width + 1, dtype=np.int64), (len(rows), width)).copy()
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def _batch_repeats(
    padded: np.ndarray, lengths: np.ndarray, min_period: int, max_period: int
) -> tuple[np.ndarray, ...]:
    """The best match per row of one padded batch (see module doc)."""
    n = padded.shape[0]
    best = [np.zeros(n, np.int64) for _ in range(4)]  # times, period, start, end
    longest = int(lengths.max()) if n else 0
    for p in range(min_period, min(max_period, longest // 3) + 1):
        rows_n = longest // p + 1  # OLMo pads by 1..p values: one more row than full rows
        shaped = padded[:, : rows_n * p].reshape(n, rows_n, p)
        eq = shaped == np.roll(shaped, 1, axis=1)  # [n, rows, p]
        full = eq.all(axis=2)  # [n, rows]: row equal to the previous row
        edges = np.diff(full.astype(np.int8), axis=1, prepend=0, append=0)
        r_start, c_start = np.nonzero(edges == 1)  # first periodic row of each block
        r_end, c_stop = np.nonzero(edges == -1)  # one past its last periodic row
        if len(r_start) == 0:
            continue
        # Row 0 is never periodic (its roll partner, the last row, ends in padding), nor is the
        # last row, so c_start - 1 and c_stop are real rows and neither is all-equal.
        before = eq[r_start, c_start - 1]  # [k, p]
        after = eq[r_end, c_stop]
        trailing = np.argmax(~before[:, ::-1], axis=1)
        leading = np.argmax(~after, axis=1)
        start = (c_start - 1) * p - trailing
        end = c_stop * p + leading
        times = (end - start) // p
        keep = times > 2
        if not keep.any():
            continue
        r, times, start, end = r_start[keep], times[keep], start[keep], end[keep]
        # Per row, the block with the most repetitions, the first one on ties.
        order = np.lexsort((start, -times, r))
        r, times, start, end = r[order], times[order], start[order], end[order]
        first = np.concatenate([[True], r[1:] != r[:-1]])
        r, times, start, end = r[first], times[first], start[first], end[first]
        better = times > best[0][r]  # strict: a smaller period wins a tie
        r = r[better]
        best[0][r], best[1][r] = times[better], p
        best[2][r], best[3][r] = start[better], end[better]
    return tuple(best)


def find_repeats(
    rows: Sequence[np.ndarray],
    *,
    min_period: int = MIN_PERIOD,
    max_period: int = MAX_PERIOD,
) -> Repeats:
    """The strongest periodic match of every token row (documents or training instances).

    Rows are grouped by length so padding stays small, and batched up to BATCH_CELLS tokens.
    """
    n = len(rows)
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=n)
    out = [np.zeros(n, np.int64) for _ in range(4)]
    order = np.argsort(lengths, kind="stable")
    i = 0
    while i < n:
        width = int(lengths[order[i]]) + 1
        j = i + 1
        # Grow the batch while the widest row stays within 2x the narrowest (+64) and the
        # padded batch within BATCH_CELLS.
        while j < n:
            w = int(lengths[order[j]]) + 1
            if w > 2 * width + 64 or (j - i + 1) * w > BATCH_CELLS:
                break
            j += 1
        idx = order[i:j]
        widest = int(lengths[idx].max()) + max_period + 1
        padded = _pad_batch([np.asarray(rows[k], dtype=np.int64) for k in idx], widest)
        for dst, src in zip(
            out, _batch_repeats(padded, lengths[idx], min_period, max_period), strict=True
        ):
            dst[idx] = src
        i = j
    return Repeats(*out)
