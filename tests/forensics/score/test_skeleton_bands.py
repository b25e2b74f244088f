"""Template clusters from the skeleton's LSH bands (forensics.score.skeleton.cluster_bands):
the signatures are read only for the documents some candidate pair holds, and the clusters
are those of the whole signature matrix. forensics.spike.parts merges a production window's
scored parts this way (tests/forensics/spike/test_parts_merge.py: parts against one table)."""

from __future__ import annotations

import random

import numpy as np
import polars as pl

from forensics.score.skeleton import MIN_CLUSTER, Bands, Signatures, cluster_bands
from forensics.score.tokens import tokenize
from forensics_testing.demo.dirty import spam_page


def _unrelated(rng: random.Random, n: int) -> list[str]:
    """Pages of random words: no two share a band, so no pair holds them."""
    words = [f"w{i}" for i in range(5000)]
    return [" ".join(rng.choice(words) for _ in range(60)) for _ in range(n)]


def test_only_the_documents_of_candidate_pairs_are_read() -> None:
    rng = random.Random(5)
    farm = [spam_page(rng) for _ in range(40)]
    texts = farm + _unrelated(rng, 200)
    rng.shuffle(texts)
    series = pl.Series(texts)
    sigs = Signatures.of(tokenize(series))
    docs = np.flatnonzero(sigs.eligible)
    asked: dict[str, np.ndarray] = {}

    def rows(kind: str, at: np.ndarray) -> np.ndarray:
        assert np.all(np.diff(at) > 0), "positions are asked for sorted, once each"
        asked[kind] = at
        return (sigs.skeleton if kind == "skeleton" else sigs.raw)[docs[at]]

    bands = Bands.of(sigs.skeleton[docs])
    clusters = cluster_bands(bands, sigs.eligible, sigs.short, series.hash().to_numpy(), rows)
    farm_rows = {i for i, t in enumerate(texts) if t in set(farm)}
    read = set(docs[asked["skeleton"]].tolist())
    assert read <= farm_rows and len(read) >= MIN_CLUSTER, "only the farm's pages are read"
    assert set(docs[asked["raw"]].tolist()) <= read
    in_template = set(np.flatnonzero(clusters.size >= MIN_CLUSTER).tolist())
    assert len(in_template) >= len(farm) - 1 and in_template <= farm_rows


def test_bands_of_parts_are_the_bands_of_the_whole() -> None:
    """The merge builds the bands part by part and concatenates them."""
    rng = random.Random(9)
    sigs = Signatures.of(tokenize(pl.Series([spam_page(rng) for _ in range(30)])))
    whole = Bands.of(sigs.skeleton)
    parts = Bands.concat([Bands.of(sigs.skeleton[:7]), Bands.of(sigs.skeleton[7:])])
    assert np.array_equal(whole.key, parts.key) and np.array_equal(whole.filled, parts.filled)
    assert whole.key.shape == (32, 30) and whole.filled.any()


def test_distinct_sorted_is_numpys_unique() -> None:
    from forensics.score.skeleton import distinct_sorted

    rng = np.random.default_rng(3)
    values = rng.integers(-(2**40), 2**40, size=500)[rng.integers(0, 500, size=20_000)]
    assert np.array_equal(distinct_sorted(values), np.unique(values))
    assert distinct_sorted(np.zeros(0, dtype=np.int64)).size == 0


def test_pair_jaccard_is_the_share_of_equal_bins_among_filled_ones() -> None:
    """The compiled estimate against numpy's reading of the same definition, with empty bins
    on either side and a pair of two empty rows."""
    from forensics.score.skeleton import _EMPTY, _jaccard

    rng = np.random.default_rng(4)
    sig = rng.integers(0, 4, size=(50, 128)).astype(np.uint64)
    sig[rng.random(sig.shape) < 0.3] = _EMPTY
    sig[7] = _EMPTY
    a, b = rng.integers(0, 50, size=400), rng.integers(0, 50, size=400)
    a[0] = b[0] = 7
    filled = (sig[a] != _EMPTY) | (sig[b] != _EMPTY)
    expected = ((sig[a] == sig[b]) & filled).sum(axis=1) / np.maximum(filled.sum(axis=1), 1)
    got = _jaccard(sig, a, b)
    assert np.array_equal(got, expected) and got[0] == 0.0
