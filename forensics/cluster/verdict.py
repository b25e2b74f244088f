"""Verdicts: rank every cluster by suspicion and call it culprit, suspect or clean.

The rule needs both halves of the story before it blames a cluster: the cluster must be
over-represented in the window compared with the baseline (that is what changed before the
spike) and its documents must be flagged far more often than the data around them (that is
what could hurt the model). One half alone makes a suspect.

"The data around them" is the rest of the window: the same iterations, the same blend. It
stops being a background when it is itself dirty: when a burst fills most of the window, the
rest of each burst group is the burst's other groups (one burst falls into several embedding
clusters by topic), and no group is 5x dirtier than that. So a group the rest of the window
cannot show dirty however strong its evidence (5x the rest's flagged rate is above its own) is
compared with the baseline instead: the rate the data had before the spike. A group as common
before the spike as in it is not over-represented, so this never makes it a culprit; a group
that is the whole window has no rest and is never dirty.

A cluster that only looks dirty because it overlaps a higher-ranked culprit (the culprit crawl
batch's domains, the dataset that contains it) is a suspect "explained by" that culprit, so the
report names one culprit, not five.

Thresholds are calibrated on generated windows with the scorer's ~1% false-positive rate: a
clean window yields no culprit (tests/forensics/cluster/).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from forensics.cluster.stats import SUSPICION_FORMULA
from forensics.errors import ForensicsError

P_MAX = 1e-3  # corrected p-value below which a test counts
MIN_ENRICHMENT = 1.5  # over-representation must also be large, not merely significant
FLAG_FLOOR = 0.2  # a dirty cluster has at least this flagged rate ...
FLAG_RATIO = 5.0  # ... and at least this multiple of the rest of the window's rate
EXPLAINED_SHARE = 0.5  # flagged members inside a culprit that make a cluster "explained" by it
SPECIFIC_SHARE = 0.8  # share of a culprit's flagged documents a more specific culprit must hold


RULE = (
    f"over-represented = Holm-corrected exact-test p < {P_MAX:g} and enrichment >= "
    f"{MIN_ENRICHMENT:g} (a group new in the window qualifies when significant); dirty = flagged "
    f"rate >= max({FLAG_FLOOR:g}, {FLAG_RATIO:g} x the rest of the window's rate) and the "
    f"Holm-corrected exact test of its flagged count p < {P_MAX:g}; where {FLAG_RATIO:g} x the "
    "rest of the window's rate is above the group's own (a burst filling the window), the same "
    "against the baseline's flagged rate, by its own exact test. culprit = over-represented "
    "and dirty; suspect = exactly one of the two, or a culprit whose dirty documents are mostly "
    "inside a higher-ranked culprit (explained by it); clean otherwise. Flagged = garbage or spam "
    "score >= 0.5. Shares are over distinct documents."
)


def rule_text() -> dict[str, str]:
    """The verdict rule and the suspicion formula, as written into every report."""
    return {"verdict_rule": RULE, "suspicion_formula": SUSPICION_FORMULA}


def baseline_rule() -> pl.Expr:
    """Over-represented against the baseline window."""
    return (pl.col("p_value") < P_MAX) & (pl.col("enrichment") >= MIN_ENRICHMENT)


def window_dirty_rule() -> pl.Expr:
    """Flagged far more often than the rest of the window."""
    floor = pl.max_horizontal(pl.lit(FLAG_FLOOR), FLAG_RATIO * pl.col("rest_flagged_rate"))
    return (pl.col("flagged_rate") >= floor) & (pl.col("flag_p_value") < P_MAX)


def baseline_dirty_rule() -> pl.Expr:
    """Out of the window test's reach (5x the rest's rate is above the group's) and flagged far
    more often than the baseline; false where the baseline was not tested."""
    reach = FLAG_RATIO * pl.col("rest_flagged_rate") > pl.col("flagged_rate")
    floor = pl.max_horizontal(pl.lit(FLAG_FLOOR), FLAG_RATIO * pl.col("baseline_flagged_rate"))
    held = reach & (pl.col("flagged_rate") >= floor) & (pl.col("baseline_flag_p_value") < P_MAX)
    return held.fill_null(False)


def dirty_rule() -> pl.Expr:
    """Dirty against the rest of the window, or against the baseline where the rest of the
    window is too dirty to tell (module docstring)."""
    return window_dirty_rule() | baseline_dirty_rule()


WINDOW_BACKGROUND = "the rest of the window"
BASELINE_BACKGROUND = "the baseline"
# The columns the dirty rule reads (what a report row must hold for `dirty_against`).
_RULE_COLUMNS = (
    "flagged_rate", "rest_flagged_rate", "flag_p_value", "baseline_flagged_rate",
    "baseline_flag_p_value",
)  # fmt: skip


def dirty_against_expr() -> pl.Expr:
    """Which background a group is dirty against: `WINDOW_BACKGROUND`, `BASELINE_BACKGROUND`
    (dirty_rule's two halves, the window's first), or null when it is not dirty."""
    return (
        pl.when(window_dirty_rule())
        .then(pl.lit(WINDOW_BACKGROUND))
        .when(baseline_dirty_rule())
        .then(pl.lit(BASELINE_BACKGROUND))
        .otherwise(pl.lit(None, dtype=pl.Utf8))
    )


def dirty_floor_expr() -> pl.Expr:
    """The flagged rate a group's documents must reach to be dirty against its background (the
    baseline's rate when only that test makes it dirty, else the rest of the window's)."""
    background = (
        pl.when(dirty_against_expr() == BASELINE_BACKGROUND)
        .then(pl.col("baseline_flagged_rate"))
        .otherwise(pl.col("rest_flagged_rate").fill_null(0.0))
    )
    return pl.max_horizontal(pl.lit(FLAG_FLOOR), FLAG_RATIO * background)


def reachable_floor_expr() -> pl.Expr:
    """The lowest flagged rate at which the dirty rule could hold for a group, by either of its
    halves: the window's floor, or the baseline's where the baseline was tested. A sampled
    group whose interval reaches it is not settled by its sample (the baseline's floor can be
    the lower one: where the rest of the window is dirty, or its estimate is high)."""
    window = pl.max_horizontal(pl.lit(FLAG_FLOOR), FLAG_RATIO * pl.col("rest_flagged_rate"))
    baseline = pl.max_horizontal(pl.lit(FLAG_FLOOR), FLAG_RATIO * pl.col("baseline_flagged_rate"))
    tested = (
        pl.col("baseline_flagged_rate").is_not_null() & pl.col("baseline_flagged_rate").is_not_nan()
    )
    return pl.when(tested).then(pl.min_horizontal(window, baseline)).otherwise(window)


def dirty_against(row: dict) -> str | None:
    """`dirty_against_expr` for one row of a cluster table (a report's top cluster)."""
    values = {c: [row.get(c)] for c in _RULE_COLUMNS}
    frame = pl.DataFrame(values, schema={c: pl.Float64 for c in _RULE_COLUMNS})
    return frame.select(dirty_against_expr()).item()


def background_rate(row: dict) -> float:
    """The flagged rate a group is compared with: the baseline's when only that test makes it
    dirty, else the rest of the window's."""
    if dirty_against(row) == BASELINE_BACKGROUND:
        return float(row["baseline_flagged_rate"])
    return float(row.get("rest_flagged_rate") or 0.0)


def assign_verdicts(
    clusters: pl.DataFrame, evidence: pl.Expr | None = None, represented: pl.Expr | None = None
) -> pl.DataFrame:
    """Add `over_represented`, `dirty`, `verdict`, `explained_by`; sort by suspicion.

    `evidence`: a boolean expression that also counts as over-representation (a baseline that
    cannot show it: forensics.cluster.baseline_fit), or None. `represented`: a boolean
    expression that replaces the baseline test (over-representation against the blend's
    expected share, where the baseline cannot judge), or None.

    Input: source and/or embedding cluster tables concatenated (how="diagonal"). Sorted by
    suspicion descending, then id (a dirty cluster that is not over-represented can outrank a
    culprit with fewer flagged documents: the verdict, not the rank, says who is blamed).
    A culprit is checked against the culprits ranked above it: if half or more of its flagged
    members are theirs and what is left is not dirty on its own, it becomes a suspect explained
    by the first of them; a suspect or clean cluster gets `explained_by` on the same overlap test
    (its verdict unchanged), so the report can say what is left outside the culprit. Members of
    embedding clusters are sampled documents, so an embedding
    cluster is only ever explained by a source cluster, never the other way round.
    """
    if clusters.height == 0:
        return clusters.with_columns(
            pl.lit(False).alias("over_represented"),
            pl.lit(False).alias("dirty"),
            pl.lit("clean").alias("verdict"),
            pl.lit(None, dtype=pl.Utf8).alias("explained_by"),
        )
    flagged = (
        clusters.with_columns(
            (
                (represented if represented is not None else baseline_rule())
                | (evidence if evidence is not None else pl.lit(False))
            ).alias("over_represented"),
            dirty_rule().alias("dirty"),
        )
        .with_columns(
            pl.when(pl.col("over_represented") & pl.col("dirty"))
            .then(pl.lit("culprit"))
            .when(pl.col("over_represented") | pl.col("dirty"))
            .then(pl.lit("suspect"))
            .otherwise(pl.lit("clean"))
            .alias("verdict")
        )
        .sort(["suspicion", "id"], descending=[True, False])
    )
    verdicts = flagged["verdict"].to_list()
    ids = flagged["id"].to_list()
    kinds = flagged["kind"].to_list()
    flagged_rows = member_arrays(flagged["flagged_members"])
    source_culprits = [j for j in range(flagged.height)
                       if verdicts[j] == "culprit" and kinds[j] == "source"]  # fmt: skip
    # Members as sorted arrays, and only the source culprits': every group's as Python sets
    # would be objects by the million at production scale; the flagged ones are few.
    member_rows = {j: member_array(flagged["members"][j]) for j in source_culprits}
    floors = flagged.select(dirty_floor_expr()).to_series().to_list()
    explained = _nest_source_culprits(verdicts, ids, kinds, flagged_rows, member_rows, floors)
    # the culprits left standing once nested ones gave way
    culprit_rows = [(ids[j], member_rows[j]) for j in source_culprits if verdicts[j] == "culprit"]
    for i in range(flagged.height):
        if explained[i] is not None or (verdicts[i] == "culprit" and kinds[i] == "source"):
            continue
        mine = flagged_rows[i]
        for culprit_id, rows in culprit_rows:
            if mine.size and overlap(rows, mine) / mine.size >= EXPLAINED_SHARE:
                explained[i] = culprit_id
                if verdicts[i] == "culprit":
                    verdicts[i] = "suspect"
                break
    return flagged.with_columns(
        pl.Series("verdict", verdicts, dtype=pl.Utf8),
        pl.Series("explained_by", explained, dtype=pl.Utf8),
    )


def member_arrays(lists: pl.Series) -> list[np.ndarray]:
    """Each row of a list column of rows (`members`, `flagged_members`) as `member_array`
    gives it, from one explode of the whole column: a Python set or a Series per group is
    millions of objects, and seconds, at production scale."""
    lengths = lists.list.len().fill_null(0).to_numpy()
    # only the non-empty lists are exploded: each gives exactly its own elements
    flat = lists.filter(pl.Series(lengths > 0)).explode()
    values = flat.cast(pl.Int64).fill_null(-1).to_numpy()
    ends = np.cumsum(lengths)
    out = []
    for start, end in zip(ends - lengths, ends, strict=True):
        piece = values[start:end]
        out.append(np.unique(piece[piece >= 0]))
    return out


def member_array(members: pl.Series | None) -> np.ndarray:
    """A cluster's members (its `members` list) as the sorted set of its rows."""
    if members is None:
        return np.empty(0, dtype=np.int64)
    return np.unique(members.drop_nulls().cast(pl.Int64).to_numpy())


def count_in(sorted_rows: np.ndarray, rows: np.ndarray) -> int:
    """How many of `rows` (distinct) are in `sorted_rows` (sorted, distinct: `member_array`):
    a binary search each, so a group's few flagged rows against a culprit's million members
    cost microseconds, not a sort of both."""
    if not sorted_rows.size or not rows.size:
        return 0
    at = np.minimum(np.searchsorted(sorted_rows, rows), sorted_rows.size - 1)
    return int((sorted_rows[at] == rows).sum())


def overlap(x: np.ndarray, y: np.ndarray) -> int:
    """How many rows two sorted, distinct row arrays (`member_array`) share: the smaller one's
    rows searched in the larger (a domain's few hundred in a crawl batch's million, never the
    other way round: the nested culprits of a production window compare hundreds of pairs)."""
    small, large = (x, y) if x.size <= y.size else (y, x)
    return count_in(large, small)


def overlap_matrix(groups: list[np.ndarray]) -> np.ndarray:
    """[k, k] int64: how many rows each pair of `groups` (sorted, distinct row arrays) shares,
    `overlap` of every pair at once: the groups' incidence matrix (a row per document, a column
    per group) times its transpose. Hundreds of nested culprits are tens of thousands of pairs,
    a search each took tens of seconds."""
    from scipy.sparse import csr_matrix

    k = len(groups)
    sizes = np.array([g.size for g in groups], dtype=np.int64)
    if not k or not sizes.sum():
        return np.zeros((k, k), dtype=np.int64)
    rows = np.concatenate(groups)
    documents = np.unique(rows)
    incidence = csr_matrix(
        (np.ones(rows.size, dtype=np.int64), (np.searchsorted(documents, rows),
                                              np.repeat(np.arange(k), sizes))),
        shape=(documents.size, k),
    )  # fmt: skip
    return np.asarray((incidence.T @ incidence).toarray(), dtype=np.int64)


def _nest_source_culprits(
    verdicts: list[str],
    ids: list[str],
    kinds: list[str],
    flagged_rows: list[np.ndarray],
    member_rows: dict[int, np.ndarray],
    floors: list[float],
) -> list[str | None]:
    """Resolve source culprits that nest (a dataset holding a crawl batch holding domains).

    B is inside A when half or more of B's flagged documents are A's. The most specific group
    that still holds the dirt is named: A gives way to a B inside it that holds at least
    SPECIFIC_SHARE of A's flagged documents, or outside of which A is not dirty on its own (its
    other documents flagged below A's dirty floor: the crawl batch, not its whole dataset, even
    when the dataset's clean batches carry the scorers' usual false positives); otherwise every
    B inside A gives way to A (the batch, not each of its 40 spam domains). Demoted culprits
    become suspects with `explained_by` set; `verdicts` is updated in place.
    """

    def flagged(a: int) -> int:
        return flagged_rows[a].size

    def narrower(b: int, a: int) -> bool:
        """Fewer flagged documents, or the same ones in fewer documents (the batch that is all
        of its dataset's dirt, not the dataset)."""
        fb, fa = flagged(b), flagged(a)
        return fb < fa or (fb == fa and member_rows[b].size < member_rows[a].size)

    def clean_outside(a: int, b: int) -> bool:
        rest = member_rows[a].size - overlap(member_rows[b], member_rows[a])
        if not rest:
            return True
        return (flagged(a) - common_flagged(a, b)) / rest < floors[a]

    explained: list[str | None] = [None] * len(ids)
    culprits = [i for i, v in enumerate(verdicts) if v == "culprit" and kinds[i] == "source"]
    at = {c: n for n, c in enumerate(culprits)}
    shared = overlap_matrix([flagged_rows[c] for c in culprits])

    def common_flagged(a: int, b: int) -> int:
        return int(shared[at[a], at[b]])

    inside = {
        (a, b): common_flagged(a, b) >= EXPLAINED_SHARE * flagged(b)
        for a in culprits
        for b in culprits
        if a != b and flagged(b)
    }
    for a in culprits:  # step 1: a coarse group gives way to a specific one holding its dirt
        specific = [
            b for b in culprits
            if inside.get((a, b))
            and narrower(b, a)
            and (flagged(b) >= SPECIFIC_SHARE * flagged(a) or clean_outside(a, b))
        ]  # fmt: skip
        if specific:
            explained[a] = ids[min(specific, key=flagged)]
    standing = [a for a in culprits if explained[a] is None]
    for b in standing:  # step 2: small pieces inside a standing culprit give way to it
        parents = [a for a in standing if a != b and inside.get((a, b))
                   and narrower(b, a)]  # fmt: skip
        if parents:
            explained[b] = ids[max(parents, key=flagged)]
    for i in culprits:
        if explained[i] is not None:
            verdicts[i] = "suspect"
    return explained


def headline_culprit(ranked: pl.DataFrame) -> dict | None:
    """The culprit the report leads with: the top source culprit, else the top embedding one.

    A source is what an engineer can remove from the blend; an embedding culprit leads only when
    no source stands out (its dominant sources then say where it lives).
    """
    culprits = ranked.filter(pl.col("verdict") == "culprit")
    if culprits.height == 0:
        return None
    sources = culprits.filter(pl.col("kind") == "source")
    row = (sources if sources.height else culprits).row(0, named=True)
    return row


def culprit_docs(
    ranked: pl.DataFrame, window_docs: pl.DataFrame, only: list[str] | None = None
) -> pl.DataFrame:
    """(dataset, doc_id, cluster) of the window documents in culprit clusters (or in `only`).

    Source clusters contribute all their window documents; embedding clusters their embedded
    ones (the others were never embedded). A document in several culprits is listed once, with
    the first (highest-ranked) cluster's id.
    """
    chosen = ranked.filter(
        pl.col("id").is_in(only) if only is not None else pl.col("verdict") == "culprit"
    )
    if chosen.height == 0 or window_docs.height == 0:
        return pl.DataFrame(schema={"dataset": pl.Utf8, "doc_id": pl.Int64, "cluster": pl.Utf8})
    rows = (
        chosen.select("id", "members")
        .with_row_index("_rank")
        .explode("members")
        .drop_nulls("members")
        .sort("_rank")
        .unique("members", keep="first", maintain_order=True)
    )
    positions = rows["members"].to_numpy()
    docs = window_docs.select("dataset", "doc_id")
    if positions.size and positions.max() >= docs.height:
        raise ForensicsError("culprit_docs: cluster members do not match these window documents")
    return docs.gather(positions).with_columns(pl.Series("cluster", rows["id"]))
