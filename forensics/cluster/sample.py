"""The evidence pass's sample: which documents of each group are decoded and scored, and what
the scored ones say about the whole group, with a stated interval.

Design. Every document gets a permanent random number `_u` in [0, 1), a hash of (dataset,
doc_id) with a fixed seed, the same on every run and on every side. A group (one value of one
facet, on one side) of N documents is sampled by taking its n = min(N, sample_docs) documents
with the smallest `_u`: a simple random sample without replacement of the group, seeded. Because
every group reads the same numbers, the samples of nested groups (a domain inside a crawl batch
inside a dataset) overlap as much as they can, so the union decoded is small (permanent random
numbers, as survey statistics coordinates samples: Ohlsson, "Coordination of samples using
permanent random numbers", 1995). A group estimates its flagged rate from its own sample only
(`own_sample`), never from the documents other groups added, so the estimate is unbiased and
its Clopper-Pearson interval holds (conservative: the sample is drawn without replacement).

SAMPLE_DOCS = 120 documents decide a group's flagged rate against the dirty line (at least 20%
flagged, forensics.cluster.verdict): all 120 flagged reads "97-100%", none "0-3%", a group at
the scorers' usual 1% at most about 5%; the widest interval, at 50%, is +-9 points. A group
whose interval reaches its dirty line is scored whole in pass 3 (forensics.spike.passes), so
the interval's width costs documents, never a verdict. A group of at most SAMPLE_DOCS documents
is scored whole: its figure is exact, and says so.

Fine facets (FINE_FACETS: domain, file) are different: a real corpus holds millions of domains,
so a sample of each would be most of the window. A fine group is sampled on its own only where
the census shows it over-represented in the window (`over_represented_in_census`: the exact test
of its document counts, uncorrected, so a superset of the groups the verdict's corrected test
calls over-represented): those are the groups that can be culprits. Every other fine group is
judged only where all its documents are scored (inside a coarse group pass 3 scores whole);
the rest are left out of the verdict table and counted in the report's figures note
(`--exhaustive` judges every one).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import polars as pl

from forensics.cluster.stats import enrichment_p
from forensics.cluster.verdict import MIN_ENRICHMENT, P_MAX

SAMPLE_DOCS = 120
FINE_FACETS: tuple[str, ...] = ("domain", "file")
SEED = 0x5EED_F0E5
CONFIDENCE = 0.95
HASH_ROWS = 1 << 20  # rows `permanent_random` and `own_sample` take at a time
_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


@dataclass(frozen=True)
class SampleDesign:
    """How the evidence pass sampled: `sample_docs` documents per group, `_u` columns read by
    `own_sample`; documents scored are marked `_scored`."""

    sample_docs: int = SAMPLE_DOCS


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser (Steele, Lea and Flood 2014): a well-mixed 64-bit hash of x."""
    with np.errstate(over="ignore"):
        z = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK
        z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK
        z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK
        return z ^ (z >> np.uint64(31))


def permanent_random(docs: pl.DataFrame, seed: int = SEED) -> pl.Series:
    """`_u` in [0, 1) for each (dataset, doc_id) row: the same document, the same number, on
    every run, every side and every machine (no dependence on row order or library version).
    Hashed HASH_ROWS rows at a time: the hash's steps each make a temporary array as long as
    their input, and a production census has tens of millions of rows."""
    names = docs["dataset"].cast(pl.Utf8).cast(pl.Categorical)
    codes = names.to_physical().to_numpy()
    table = np.zeros(int(codes.max(initial=0)) + 1, dtype=np.uint64)
    present = names.unique()  # each name once, its code beside it
    for code, name in zip(present.to_physical().to_list(), present.to_list(), strict=True):
        digest = hashlib.blake2b(f"{seed}:{name}".encode(), digest_size=8).digest()
        table[code] = int.from_bytes(digest)
    doc = docs["doc_id"].cast(pl.Int64).to_numpy()
    u = np.empty(docs.height, dtype=np.float64)
    for start in range(0, docs.height, HASH_ROWS):
        part = slice(start, start + HASH_ROWS)
        mixed = _splitmix64(_splitmix64(doc[part].astype(np.uint64)) ^ table[codes[part]])
        u[part] = (mixed >> np.uint64(11)).astype(np.float64) / float(2**53)
    return pl.Series("_u", u)


def own_sample(table: pl.DataFrame, sample_docs: int, *keys: pl.Expr) -> pl.Series:
    """`_own`: True for the rows of `table` in their group's own sample, the group's
    `sample_docs` smallest `_u` (ties by row order); `keys` name the group.

    Computed with numpy over the rows' group numbers (`group_numbers`): a window function
    ranking every row in its group holds several times the table's bytes at once, and the
    census of a production window has tens of millions of rows. A row is in its group's
    sample only if its `_u` is below a cutoff that, for numbers uniform in [0, 1), about
    2 * sample_docs + 64 of the group's rows fall under; those candidates are ranked exactly.
    A group with fewer candidates than it needs (possible, never likely) has all its rows
    ranked, so the answer is always the exact one. The whole-table arrays are the group
    numbers (32-bit) and two masks; the cutoffs are compared HASH_ROWS rows at a time."""
    groups = group_numbers(table, keys)
    u = table["_u"].to_numpy()
    sizes = np.bincount(groups)
    cutoffs = np.minimum(1.0, (2.0 * sample_docs + 64) / np.maximum(sizes, 1))
    candidate = np.empty(table.height, dtype=bool)
    for start in range(0, table.height, HASH_ROWS):
        part = slice(start, start + HASH_ROWS)
        np.less(u[part], cutoffs[groups[part]], out=candidate[part])
    short = np.bincount(groups[candidate], minlength=len(sizes)) < np.minimum(sizes, sample_docs)
    if short.any():
        candidate |= short[groups]
    rows = np.flatnonzero(candidate)
    del candidate
    order = np.lexsort((rows, u[rows], groups[rows]))
    ranked = groups[rows][order]
    rank = np.arange(len(ranked)) - np.searchsorted(ranked, ranked, side="left")
    mask = np.zeros(table.height, dtype=bool)
    mask[rows[order[rank < sample_docs]]] = True
    return pl.Series("_own", mask)


def group_numbers(table: pl.DataFrame, keys: tuple[pl.Expr, ...]) -> np.ndarray:
    """Each row's group (the values of `keys`) as a number in 0..groups-1 (int32): from the
    keys' categorical codes (a string key is made categorical), without sorting or hashing the
    rows; a missing value is a group of its own. 32 bits while the keys' combinations fit
    (always, for one key), else 64."""
    number: np.ndarray | None = None
    combinations = 1
    for key in table.select(*keys).get_columns():
        codes = key if key.dtype == pl.Categorical else key.cast(pl.Utf8).cast(pl.Categorical)
        values = codes.to_physical().cast(pl.Int32).fill_null(-1).to_numpy() + 1
        present = np.zeros(int(values.max(initial=0)) + 1, dtype=bool)
        present[values] = True
        compact = np.cumsum(present) - 1
        count = int(present.sum())
        combinations *= max(count, 1)
        wide = np.int32 if combinations < 2**31 else np.int64
        if number is None:
            number = compact.astype(wide)[values]
        else:
            number = number.astype(wide, copy=False) * wide(count) + compact.astype(wide)[values]
        del values
    if number is None:
        return np.zeros(table.height, dtype=np.int32)
    present = np.zeros(int(number.max(initial=0)) + 1, dtype=bool)
    present[number] = True
    compact = np.cumsum(present) - 1
    return compact.astype(np.int32 if compact.size < 2**31 else np.int64)[number]


def flagged_interval(flagged: np.ndarray, scored: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Clopper-Pearson (exact binomial) CONFIDENCE intervals of flagged / scored, per group, as
    scipy.stats.binomtest(k, n).proportion_ci(method="exact") gives them (its beta quantiles,
    here for every group at once). A group with nothing scored gets [0, 1]. Why
    Clopper-Pearson: it never undercovers, even at 0 or all flagged, where the verdicts live
    (a culprit is often 100% flagged), and scipy, already a dependency, has it."""
    from scipy.stats import beta

    k = np.asarray(flagged, dtype=np.float64)
    n = np.asarray(scored, dtype=np.float64)
    alpha = 1.0 - CONFIDENCE
    with np.errstate(invalid="ignore", divide="ignore"):
        low = np.where(k > 0, beta.ppf(alpha / 2, k, n - k + 1), 0.0)
        high = np.where(k < n, beta.ppf(1 - alpha / 2, k + 1, n - k), 1.0)
    empty = n <= 0
    return np.where(empty, 0.0, np.nan_to_num(low)), np.where(empty, 1.0, np.nan_to_num(high))


def evidence_text(row: dict) -> str:
    """What a group's flagged rate rests on: "exact: all 1,234 documents scored", or "95%
    interval 97-100%, 120 of 31,000 documents scored" (rows without sample columns: exact)."""
    docs = int(row.get("docs") or 0)
    if row.get("kind") == "embedding":
        return f"estimated from the {int(row.get('embedded') or 0):,} documents embedded"
    scored = row.get("scored_docs")
    if scored is None or int(scored) >= docs:
        return f"exact: all {docs:,} documents scored"
    low, high = 100 * float(row["flagged_low"]), 100 * float(row["flagged_high"])
    return (
        f"{CONFIDENCE:.0%} interval {low:.0f}-{high:.0f}%, {int(scored):,} of {docs:,} "
        "documents scored"
    )


def over_represented_in_census(
    window_docs: np.ndarray, baseline_docs: np.ndarray, n_window: int, n_baseline: int
) -> np.ndarray:
    """Per group: the exact over-representation test of its document counts (p < P_MAX, not
    Holm-corrected) and enrichment >= MIN_ENRICHMENT, as forensics.cluster.verdict's baseline
    rule reads them; from the census's counts alone, before anything is scored."""
    a = np.asarray(window_docs, dtype=np.float64)
    c = np.asarray(baseline_docs, dtype=np.float64)
    nw, nb = max(int(n_window), 1), max(int(n_baseline), 1)
    enrichment = ((a + 0.5) / (nw + 1)) / ((c + 0.5) / (nb + 1))
    return (enrichment_p(a, c, nw, nb) < P_MAX) & (enrichment >= MIN_ENRICHMENT)
