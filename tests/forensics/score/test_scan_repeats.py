"""Repeated token n-grams (forensics/score/repeats.py) against OLMo-core's own function.

The oracle is `find_periodic_sequences` from the installed ai2-olmo-core wheel (3.0.0; the same
code as allenai/OLMo-core commit fa6c5014c9f6e9ee789da2d9c20d5126fee8df0d,
src/olmo_core/data/utils.py:608-720), executed from the wheel's source file: importing
`olmo_core.data.utils` would pull torch and cached-path's cloud clients for four numpy functions.
The flag threshold (32) and periods (1-13) are `InstanceFilterConfig`'s defaults
(src/olmo_core/data/numpy_dataset.py:100-104), applied as in `_validate_instance` (:353-363).
"""

from __future__ import annotations

import numpy as np
import pytest

from forensics.score.repeats import MAX_COUNT, find_repeats
from forensics_testing.olmo_repeats_oracle import load_olmo


@pytest.fixture(scope="module")
def olmo():
    return load_olmo()


def oracle_best(fn, row: np.ndarray) -> tuple[int, int, int, int]:
    """(times, period, start, end) of OLMo-core's strongest match (first in its order on ties)."""
    best = (0, 0, 0, 0)
    for m in fn(np.asarray(row, dtype=np.int64), max_period=13, min_period=1):
        if m.times > best[0]:
            best = (int(m.times), int(m.period), int(m.start), int(m.end))
    return best


def planted(rng: np.random.Generator, period: int, count: int, length: int) -> np.ndarray:
    """Random tokens with `count` back-to-back copies of a random `period`-gram somewhere."""
    unit = rng.integers(0, 50, size=period)
    while period > 1 and len(set(unit.tolist())) == 1:
        unit = rng.integers(0, 50, size=period)
    run = np.tile(unit, count)
    before = int(rng.integers(0, max(1, length - len(run))))
    row = rng.integers(0, 50, size=max(length, len(run) + before))
    row[before : before + len(run)] = run
    return row


def test_matches_olmo_core_on_random_and_planted_rows(olmo) -> None:
    rng = np.random.default_rng(17)
    rows = []
    for period in range(1, 14):
        for count in (2, 3, 31, 32, 33, 40):
            rows.append(planted(rng, period, count, int(rng.integers(period * count, 900))))
    rows += [rng.integers(0, 3, size=int(rng.integers(0, 300))) for _ in range(60)]  # tiny vocab
    rows += [np.zeros(n, np.int64) for n in (0, 1, 2, 3, 38, 39, 95, 96, 97)]
    got = find_repeats(rows)
    for i, row in enumerate(rows):
        want = oracle_best(olmo, row)
        have = (int(got.times[i]), int(got.period[i]), int(got.start[i]), int(got.end[i]))
        assert have == want, f"row {i} (length {len(row)}): ours {have}, OLMo-core {want}"


@pytest.mark.parametrize("period", range(1, 14))
def test_boundary_counts_31_and_32_per_period(olmo, period: int) -> None:
    """A period-p n-gram 31 times is kept, 32 times dropped: OLMo-core's instance filter."""
    rng = np.random.default_rng(period)
    unit = rng.permutation(np.arange(100, 100 + period))  # distinct tokens: minimal period p
    pad = rng.integers(200, 300, size=17)
    rows = [np.concatenate([pad, np.tile(unit, c), pad[::-1]]) for c in (31, 32)]
    got = find_repeats(rows)
    assert got.flagged().tolist() == [False, True]
    assert got.period.tolist() == [period, period]
    for i, row in enumerate(rows):
        flag = any(m.times >= MAX_COUNT for m in olmo(row, max_period=13, min_period=1))
        assert flag == bool(got.flagged()[i])


def test_unicode_repeats_are_counted_in_tokens(olmo) -> None:
    """Multi-byte characters repeat with the period of their tokens (here UTF-8 bytes)."""
    cases = {"🙂": 4, "日本": 6, "g4OD": 4, "Ünï": 5}
    for text, period in cases.items():
        for count, flagged in ((31, False), (32, True)):
            doc = f"intro {text * count} outro".encode()
            tokens = np.frombuffer(doc, dtype=np.uint8).astype(np.int64)
            got = find_repeats([tokens])
            assert bool(got.flagged()[0]) is flagged, (text, count)
            assert int(got.period[0]) == period
            assert oracle_best(olmo, tokens)[:2] == (int(got.times[0]), period)


def test_batched_equals_one_by_one() -> None:
    rng = np.random.default_rng(3)
    rows = [
        planted(rng, int(rng.integers(1, 14)), 35, int(rng.integers(500, 3000))) for _ in range(40)
    ]
    together = find_repeats(rows)
    for i, row in enumerate(rows):
        alone = find_repeats([row])
        assert int(alone.times[0]) == int(together.times[i])
        assert int(alone.start[0]) == int(together.start[i])
