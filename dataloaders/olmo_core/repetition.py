"""OLMo-core's instance filter: which instances a repeated n-gram masks out of the loss.

`NumpyDatasetBase._validate_instance` (olmo_core/data/numpy_dataset.py) marks an instance invalid
when `find_periodic_sequences(tokens, max_period, min_period)` (olmo_core/data/utils.py) yields a
run with `times >= repetition_max_count`. That function, per period p in min..min(max, n // 3):
pads the tokens with -1 to a multiple of p (a whole row of padding when n is already a multiple),
views them as rows of p, finds the rows equal to the previous row (the roll wraps row 0 onto the
padding row, which never matches), groups consecutive such rows, widens each group by the trailing
matches of the row before it and the leading matches of the row after it, and reports
`times = (end - start) // p` when it exceeds 2.

This is the same computation, vectorised over a block of instances; the few groups long enough to
reach the threshold are then finished one by one exactly as the library does.
"""

from __future__ import annotations

import numpy as np


def _leading_true(row: np.ndarray) -> int:
    """find_end_first_consecutive_true: count of leading True values."""
    falses = np.flatnonzero(~row)
    return int(falses[0]) if len(falses) else len(row)


def _start_offset(row: np.ndarray) -> int:
    """find_start_last_consecutive_true, then `period - x if x > 0 else 0`."""
    trailing = _leading_true(row[::-1])
    found = len(row) - trailing if trailing > 0 else -1
    return len(row) - found if found > 0 else 0


def masked_instances(
    instances: np.ndarray, *, max_period: int, min_period: int, max_count: int
) -> np.ndarray:
    """Bool per row of `instances` (n, seq_len): True when OLMo-core's filter masks it."""
    tokens = np.asarray(instances, dtype=np.int64)
    n, length = tokens.shape
    masked = np.zeros(n, dtype=bool)
    top = min(max_period, length // 3)
    need = max(max_count, 3)  # yielded only when times > 2, counted when times >= max_count
    for period in range(min_period, top + 1):
        pad = period - length % period
        padded = np.full((n, length + pad), -1, dtype=np.int64)
        padded[:, :length] = tokens
        shaped = padded.reshape(n, -1, period)
        eq = shaped == np.roll(shaped, 1, axis=1)
        full = eq.all(axis=2)
        # groups of consecutive equal rows; a group of g rows spans at most g + 3 periods
        edges = np.diff(full.astype(np.int8), axis=1, prepend=0, append=0)
        rows_s, starts = np.nonzero(edges == 1)
        _, ends = np.nonzero(edges == -1)
        candidate = (ends - starts) + 3 >= need
        for i, s, e in zip(rows_s[candidate], starts[candidate], ends[candidate] - 1, strict=True):
            if masked[i]:
                continue
            start_pos = (s - 1) * period - _start_offset(eq[i, s - 1])
            end_pos = (e + 1) * period + _leading_true(eq[i, e + 1])
            times = (end_pos - start_pos) // period
            if times > 2 and times >= max_count:
                masked[i] = True
    return masked
