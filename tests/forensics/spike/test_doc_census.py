"""The census (forensics.spike.doc_census): every document each side drew, once, read a range
of document ids at a time, is the one group-by over the whole replay table it stands for."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import forensics.spike.doc_census as doc_census
from forensics.spike.doc_census import census_buckets, census_documents


def _replay(rows: int = 5_000) -> pl.DataFrame:
    """Replay rows: two sides, three datasets of different sizes, documents drawn many times,
    a facet missing on some of a document's rows (the first value present counts)."""
    rng = np.random.default_rng(2)
    dataset = rng.choice(["web", "code", "prose"], rows)
    top = {"web": 900, "code": 60, "prose": 4_000}
    doc_id = np.array([rng.integers(0, top[d]) for d in dataset])
    source = np.array([f"s{d % 5}" for d in doc_id], dtype=object)
    source[rng.random(rows) < 0.3] = None
    return pl.DataFrame({
        "iteration": rng.integers(0, 100, rows),
        "side": rng.choice(["window", "baseline"], rows),
        "dataset": dataset,
        "doc_id": doc_id,
        "source": source.tolist(),
        "crawl_batch": [f"c{d % 3}" for d in doc_id],
    })  # fmt: skip


@pytest.mark.parametrize("rows_per_range", [10**9, 700, 1])
def test_census_by_ranges_is_one_group_by(monkeypatch, rows_per_range: int) -> None:
    replay = _replay()
    monkeypatch.setattr(doc_census, "CENSUS_ROWS", rows_per_range)
    got = census_documents(replay.lazy(), ["source", "crawl_batch"], progress=False)
    expected = (
        replay.group_by("side", "dataset", "doc_id")
        .agg(pl.col("source", "crawl_batch").drop_nulls().first())
        .sort("side", "dataset", "doc_id")
    )
    assert got.schema["side"] == got.schema["source"] == pl.Categorical
    assert got.with_columns(pl.col("side", "source", "crawl_batch").cast(pl.Utf8)).equals(expected)
    ranges = census_buckets(replay.lazy())
    assert [r[0] for r in ranges] == sorted(r[0] for r in ranges)  # datasets in order
    expected_ranges = {10**9: (3, 3), 700: (4, 19), 1: (1_000, 5_000)}[rows_per_range]
    assert expected_ranges[0] <= len(ranges) <= expected_ranges[1]


def test_an_empty_replay_has_an_empty_census() -> None:
    empty = _replay().head(0)
    got = census_documents(empty, ["source"], progress=False)
    assert got.height == 0 and got.columns == ["side", "dataset", "doc_id", "source"]


def test_distinct_documents_of_both_sides() -> None:
    """Window and baseline documents, less those in both: polars' n_unique of the two sides."""
    from forensics.spike.passes import distinct_documents, narrow_sides

    census = census_documents(_replay(), ["source"], progress=False).with_columns(
        pl.lit(False).alias("_chosen")
    )
    sides = narrow_sides(census)
    assert sides[0].height and sides[1].height
    expected = pl.concat([s.select("dataset", "doc_id") for s in sides]).n_unique()
    assert distinct_documents(sides) == expected < sides[0].height + sides[1].height
    only_window = sides[0], sides[1].filter(pl.col("dataset") == "web")
    expected = pl.concat([s.select("dataset", "doc_id") for s in only_window]).n_unique()
    assert distinct_documents(only_window) == expected


def test_positions_in_a_sorted_side() -> None:
    from forensics.cluster.positions import positions_in

    side = pl.DataFrame({"dataset": ["a", "a", "a", "b", "b"], "doc_id": [1, 5, 9, 2, 5]})
    keys = pl.DataFrame({"dataset": ["b", "a", "a", "c", "b", "a"], "doc_id": [5, 9, 4, 1, 3, 1]})
    assert positions_in(side, keys).tolist() == [4, 2, -1, -1, -1, 0]
    assert positions_in(side.head(0), keys).tolist() == [-1] * 6


def test_census_agrees_with_the_scored_documents_facets() -> None:
    """The census gives each scored document its decoded facets (the window's row, else the
    baseline's): agreed; one value different, or a facet the census lacks: not."""
    from forensics.spike.passes import census_agrees

    def side(ids: list[int], sources: list[str | None]) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "dataset": ["web"] * len(ids),
                "doc_id": ids,
                "_u": [0.5] * len(ids),
                "source": pl.Series(sources, dtype=pl.Utf8).cast(pl.Categorical),
            }  # fmt: skip
        )

    sides = side([1, 2, 3], ["x", None, "y"]), side([3, 7], ["y", "z"])
    scored = pl.DataFrame({"dataset": ["web"] * 3, "doc_id": [7, 2, 1],
                           "source": ["z", None, "x"], "garbage_score": [0.0] * 3})  # fmt: skip
    assert census_agrees(sides, scored)
    assert not census_agrees(sides, scored.with_columns(pl.Series("source", ["z", "w", "x"])))
    assert not census_agrees(sides, scored.with_columns(pl.Series("source", ["q", None, "x"])))
    assert not census_agrees((sides[0].drop("source"), sides[1].drop("source")), scored)
    assert census_agrees(sides, scored.drop("source"))


def test_positions_in_an_unsorted_table_are_found_by_a_join() -> None:
    """A table not sorted by (dataset, doc_id), or holding a document twice, is joined: the
    same answer (the first row of a document held twice)."""
    from forensics.cluster.positions import positions_in

    keys = pl.DataFrame({"dataset": ["b", "a", "a", "c"], "doc_id": [5, 9, 4, 1]})
    shuffled = pl.DataFrame({"dataset": ["b", "a", "b", "a"], "doc_id": [5, 9, 2, 1]})
    assert positions_in(shuffled, keys).tolist() == [0, 1, -1, -1]
    twice = pl.DataFrame({"dataset": ["a", "a", "b"], "doc_id": [9, 9, 5]})
    assert positions_in(twice, keys).tolist() == [2, 0, -1, -1]
