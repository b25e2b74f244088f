"""Skip ranges: merging, both trainers' flag strings parsed back, collateral, sample ranges."""

from __future__ import annotations

import random

import polars as pl
import pytest

from forensics.errors import ForensicsError
from forensics.skip import (
    collateral,
    deepspeed_representable,
    expand,
    fingerprint_differences,
    megatron_deepspeed_flag,
    megatron_deepspeed_ranges,
    megatron_lm_flag,
    merge_ranges,
    parse_megatron_deepspeed,
    parse_megatron_lm,
    sample_ranges,
    select_iterations,
)


def test_merge_and_expand() -> None:
    assert merge_ranges([5, 3, 4, 9, 10, 12]) == [(3, 5), (9, 10), (12, 12)]
    assert expand([(3, 5), (9, 10)]) == [3, 4, 5, 9, 10]
    assert merge_ranges([]) == []


def test_deepspeed_shift_matches_the_shared_notes_example() -> None:
    # The BLOOM-style two windows: the second is written 200 iterations earlier.
    ranges = [(40701, 40900), (42401, 42600)]
    assert megatron_deepspeed_ranges(ranges) == [(40701, 40900), (42201, 42400)]
    flag = megatron_deepspeed_flag(ranges)
    assert flag == "--skip-train-iteration-range 40701-40900 42201-42400"
    assert parse_megatron_deepspeed(flag, resume_from=40600) == set(expand(ranges))
    # Written naively (absolute), DeepSpeed would drop 200 batches too late.
    naive = parse_megatron_deepspeed("--skip-train-iteration-range 40701-40900 42401-42600", 40600)
    assert naive != set(expand(ranges))
    assert max(naive) == 42800


def test_close_ranges_are_joined_for_deepspeed() -> None:
    # gap of 3 after a range of 5: the shifted second range (13-15) would overlap the first.
    assert deepspeed_representable([(10, 14), (18, 20)]) == [(10, 20)]
    # gap of 5: shifted to 15-17, adjacent to 10-14, which the parser keeps apart.
    assert deepspeed_representable([(10, 14), (20, 22)]) == [(10, 14), (20, 22)]
    assert parse_megatron_deepspeed("--skip-train-iteration-range 10-14 15-17", 0) == set(
        range(10, 15)
    ) | set(range(20, 23))


def test_deepspeed_parser_merges_overlaps_only_and_drops_ranges_behind_the_restart() -> None:
    # Overlapping ranges merge (1-5 2-6 -> 1-6), as its argument parser does.
    assert parse_megatron_deepspeed("--skip-train-iteration-range 2-6 1-5", 0) == set(range(1, 7))
    # A range that ended before the loaded iteration is dropped at start, not blocking.
    assert parse_megatron_deepspeed("--skip-train-iteration-range 3-4 12-13", 10) == {12, 13}


def test_both_flag_strings_parse_back_to_the_same_batches_random() -> None:
    rng = random.Random(7)
    for _ in range(300):
        resume = rng.randint(0, 500)
        its = [i for i in range(resume + 1, resume + 200) if rng.random() < rng.random()]
        ranges = deepspeed_representable(merge_ranges(its))
        want = set(expand(ranges))
        assert want >= set(its)
        assert parse_megatron_lm(megatron_lm_flag(ranges)) == want
        assert parse_megatron_deepspeed(megatron_deepspeed_flag(ranges), resume) == want


def test_flag_parsers_reject_garbage() -> None:
    with pytest.raises(ForensicsError, match="iterations-to-skip"):
        parse_megatron_lm("--iterations-to-skip 5 x")
    with pytest.raises(ForensicsError, match="a<=b"):
        parse_megatron_deepspeed("--skip-train-iteration-range 9-3", 0)
    with pytest.raises(ForensicsError, match="starting with"):
        parse_megatron_lm("--skip-train-iteration-range 1-2")
    assert parse_megatron_lm("") == set()


def _exposure() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "iteration": [101, 102, 103, 104, 105, 106],
            "samples": [8, 8, 8, 8, 8, 8],
            "flagged_samples": [0, 1, 4, 0, 8, 2],
        }
    )


def test_select_and_collateral_are_true_counts() -> None:
    exp = _exposure()
    assert select_iterations(exp) == [102, 103, 105, 106]
    assert select_iterations(exp, threshold=0.25) == [103, 105]
    ranges = merge_ranges(select_iterations(exp, threshold=0.25))
    assert ranges == [(103, 103), (105, 105)]
    col = collateral(exp, ranges)
    assert col["clean_samples_skipped"] == 4 + 0
    assert col["culprit_samples_missed"] == 1 + 2
    assert col["culprit_iterations_missed"] == 2
    # gap 1 >= length 1: shifted to 103 and 104, adjacent, kept apart by DeepSpeed's parser.
    assert deepspeed_representable(ranges) == ranges
    joined = deepspeed_representable([(102, 103), (105, 105)])  # gap 1 < length 2: joined
    assert joined == [(102, 105)]
    assert collateral(exp, joined)["clean_samples_skipped"] == 7 + 4 + 8 + 0 + 0
    with pytest.raises(ForensicsError, match="threshold"):
        select_iterations(exp, threshold=1.0)


def test_sample_ranges_are_half_open_and_merged() -> None:
    its = pl.DataFrame(
        {"iteration": [1, 2, 3, 4], "first_sample": [0, 4, 12, 20], "end_sample": [4, 12, 20, 28]}
    )
    assert sample_ranges(its, [(1, 1), (3, 4)]) == [[0, 4], [12, 28]]


def test_fingerprint_differences_name_the_field() -> None:
    a = {"config_hash": "abc", "files": [{"size": 10, "idx_sha256": "x"}]}
    b = {"config_hash": "abd", "files": [{"size": 11, "idx_sha256": "x"}]}
    diffs = fingerprint_differences(a, b)
    assert len(diffs) == 2 and diffs[0].startswith("config_hash") and "files[0].size" in diffs[1]
    assert fingerprint_differences(a, a) == []


def test_megatron_lm_values_are_completed_step_counts() -> None:
    """Megatron-LM's loop checks `iteration in args.iterations_to_skip` before the step, while
    `iteration` counts completed steps; the step it drops is then logged as iteration + 1."""
    flag = megatron_lm_flag([(81001, 81003)])
    assert flag == "--iterations-to-skip 81000 81001 81002"

    def simulate(values: set[int], resume: int, steps: int) -> set[int]:
        dropped, iteration = set(), resume
        while iteration < resume + steps:
            if iteration in values:
                dropped.add(iteration + 1)  # the logged number of the batch it drains
            iteration += 1
        return dropped

    values = {int(v) for v in flag.split()[1:]}
    assert simulate(values, resume=80950, steps=100) == {81001, 81002, 81003}
    assert parse_megatron_lm(flag) == {81001, 81002, 81003}
