"""Source clusters: the window's documents grouped by each manifest facet, against the baseline.

A loss spike that does not come back down is usually one source's fault: a crawl batch with
mojibake, a template farm, a new dataset switched in by the blend. The manifest already names
those sources (dataset, source, crawl_batch, domain, file), so each facet value is a candidate
cluster, and the question per candidate is the one `stats.group_statistics` answers.

Input document tables (polars, one row per distinct document): `dataset` (Utf8), `doc_id`
(Int64), facet columns (Utf8), `text`, `garbage_score`, `spam_score` (Float64 in [0, 1], >= 0.5
flagged), `garbage_reason`, `spam_reason` (Utf8, "" when clean).
"""

from __future__ import annotations

import re

import numpy as np
import polars as pl

from forensics.cluster.sample import SampleDesign, flagged_interval, own_sample
from forensics.cluster.stats import FLAG_THRESHOLD, group_statistics
from forensics.errors import ForensicsError

# Facets looked for when none are named, coarse to fine. `url` is left out on purpose: one
# document per value says nothing about a source.
DEFAULT_FACETS: tuple[str, ...] = ("dataset", "source", "crawl_batch", "domain", "file")
REQUIRED_COLUMNS: tuple[str, ...] = ("dataset", "doc_id", "garbage_score", "spam_score")
MISSING_KEY = "(none)"
TOP_REASONS = 3
# When several facets hold exactly the same documents, the row is named after the first facet in
# this order (a crawl batch is what an engineer removes; a file or dataset name says less), then
# after the order the facets were given in.
NAME_PREFERENCE: tuple[str, ...] = ("crawl_batch", "source", "domain", "file", "dataset")

# Column order of every cluster table (source and embedding share it; embedding adds a few).
CLUSTER_COLUMNS: tuple[str, ...] = (
    "id",
    "kind",
    "facet",
    "key",
    "docs",
    "baseline_docs",
    "window_share",
    "baseline_share",
    "enrichment",
    "p_value",
    "new_in_window",
    "flagged",
    "flagged_rate",
    "garbage_rate",
    "spam_rate",
    "rest_flagged_rate",
    "flag_p_value",
    "baseline_flagged_rate",
    "baseline_flag_p_value",
    "suspicion",
    "top_reasons",
    "aliases",
    "members",
    "flagged_members",
)


def prepare_docs(
    docs: pl.DataFrame, name: str, *, text: bool = True, scores: bool = True
) -> pl.DataFrame:
    """Validate a document table and add the working columns every clusterer reads.

    Added columns: `_row` (UInt32, the row's position in the table as given: `members` lists
    refer to it), `_garbage` / `_spam` / `_flag` (Boolean: score >= 0.5, either one), and
    `garbage_reason` / `spam_reason` filled with "" when absent. Null or NaN scores count as 0;
    with `scores` the score columns are so filled too, without they are left as given (the
    source clusters read only the flags: at production scale most documents are unscored, and
    a filled copy of both scores is 16 bytes a document). `text` (filled with "" where
    absent) is kept only with `text`: the source clusters never read it, and a copy of every
    scored text per side is hundreds of MB at production scale.
    """
    if not isinstance(docs, pl.DataFrame):
        raise ForensicsError(f"{name}: expected a polars DataFrame, got {type(docs).__name__}")
    missing = [c for c in REQUIRED_COLUMNS if c not in docs.columns]
    if missing:
        raise ForensicsError(f"{name}: missing column(s) {', '.join(missing)}")
    out = docs.with_row_index("_row")
    if not text:
        out = out.drop("text", strict=False)
    for reason in ("garbage_reason", "spam_reason"):
        if reason not in out.columns:
            out = out.with_columns(pl.lit("", dtype=pl.Utf8).alias(reason))
    if text and "text" not in out.columns:
        out = out.with_columns(pl.lit("", dtype=pl.Utf8).alias("text"))
    filled = {
        c: pl.col(c).cast(pl.Float64).fill_nan(0.0).fill_null(0.0)
        for c in ("garbage_score", "spam_score")
    }
    garbage, spam = (
        (pl.col(c) if scores else filled[c]) >= FLAG_THRESHOLD for c in filled
    )  # fmt: skip
    try:
        out = out.with_columns(
            *([v.alias(c) for c, v in filled.items()] if scores else []),
            *[_empty_for_null(out, reason) for reason in ("garbage_reason", "spam_reason")],
            *([pl.col("text").cast(pl.Utf8).fill_null("")] if text else []),
        )
        out = out.with_columns(garbage.alias("_garbage"), spam.alias("_spam"))
    except pl.exceptions.PolarsError as err:
        raise ForensicsError(f"{name}: scores are not numeric ({err.__class__.__name__})") from err
    return out.with_columns((pl.col("_garbage") | pl.col("_spam")).alias("_flag"))


def _empty_for_null(table: pl.DataFrame, column: str) -> pl.Expr:
    """`column` with "" for null, as a string column, or as the categorical it is (its codes
    are a quarter of a string's bytes a row; every reader filters before it reads the text)."""
    expr = pl.col(column)
    if table.schema[column] != pl.Categorical:
        expr = expr.cast(pl.Utf8)
    return expr.fill_null("")


def resolve_facets(
    window: pl.DataFrame, baseline: pl.DataFrame, facets: list[str] | None
) -> list[str]:
    """The facets to group by: the named ones (which must exist), else the default ones present."""
    if facets is None:
        return [f for f in DEFAULT_FACETS if f in window.columns]
    for facet in facets:
        for name, table in (("window documents", window), ("baseline documents", baseline)):
            if facet not in table.columns:
                raise ForensicsError(f"{name}: no facet column {facet!r} (have {table.columns})")
    return list(facets)


def facet_key(facet: str, table: pl.DataFrame | None = None) -> pl.Expr:
    """A facet's group key (MISSING_KEY for a missing value), as a string; as the categorical
    it is in `table` when it is one (grouped by its codes, not by millions of strings: the
    group keys are cast to strings after, `_string_key`)."""
    column = pl.col(facet)
    if table is None or table.schema[facet] != pl.Categorical:
        column = column.cast(pl.Utf8)
    return column.fill_null(MISSING_KEY).alias("key")


def _string_key(groups: pl.DataFrame) -> pl.DataFrame:
    """`groups` with its `key` column a string column (`facet_key`)."""
    return groups.with_columns(pl.col("key").cast(pl.Utf8))


def _signature_columns(n_rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two random 31-bit integers per row (held in 32 bits; summed as 64-bit): summed over a
    group they fingerprint its member set."""
    rng = np.random.default_rng(seed)
    return (
        rng.integers(0, 2**31, size=n_rows, dtype=np.int64).astype(np.uint32),
        rng.integers(0, 2**31, size=n_rows, dtype=np.int64).astype(np.uint32),
    )


# Reason strings carry numbers and quoted samples ("top 2-gram covers 25% of word characters",
# "12 C1 control characters like '\\x85'"); the *kind* of a reason is its rule key where the
# scorers gave one (`score_table(keys=True)`: `garbage_rule`, `spam_rule`), and otherwise (a
# table scored elsewhere or by an older version) what is left of the text without them.
# An n-gram's n and a codec name's digits (UTF-16, C1, cp1252) are part of the kind.
REASON_SEPARATOR = "; "  # how the scorers join several reasons of one document
RULE_SEPARATOR = ";"  # how they join the rule keys of those reasons, in the same order
RULE_COLUMNS = {"garbage_reason": "garbage_rule", "spam_reason": "spam_rule"}
_QUOTED = re.compile(r"(?<!\w)(['\"]).*?\1(?=[\s,;:)]|$)")
_NUMBER = re.compile(r"(?<![\w+-])[<>~]?\d+(?:[.,]\d+)*(?![\w-])")


def reason_kind(reason: str) -> str:
    """The group key of a reason without a rule key: quoted samples and numbers stripped."""
    return _NUMBER.sub("N", _QUOTED.sub("'…'", reason)).strip()


def _keyed_reasons(window: pl.DataFrame, key: pl.Expr, column: str) -> pl.DataFrame:
    """`key`, `kind` (the rule key), `reason`: one row per reason of a flagged document.

    A reason without a key (a note written beside the scores) is grouped by its text.

    A document's reasons and rule keys come in the same order; only the first reason can hold
    the separator (inside a quoted sample), so the text is split from the right as many times
    as there are keys after the first.
    """
    rows = window.select(
        key, pl.col(column).alias("reason"), pl.col(RULE_COLUMNS[column]).alias("kind")
    ).filter(pl.col("reason").fill_null("") != "")
    keys, kinds, reasons = [], [], []
    for k, text, rules in rows.iter_rows():
        names = rules.split(RULE_SEPARATOR) if rules else [reason_kind(text)]
        parts = text.rsplit(REASON_SEPARATOR, len(names) - 1)
        if len(parts) != len(names):  # not the scorers' own pairing: one reason, first key
            parts, names = [text], names[:1]
        keys += [k] * len(names)
        kinds += names
        reasons += [p.strip() for p in parts]
    return pl.DataFrame(
        {"key": keys, "kind": kinds, "reason": reasons},
        schema={"key": rows.schema["key"], "kind": pl.Utf8, "reason": pl.Utf8},
    )


def _texted_reasons(window: pl.DataFrame, key: pl.Expr, column: str) -> pl.DataFrame:
    """`key`, `kind` (`reason_kind`), `reason` for a reason column without rule keys."""
    long = (
        window.select(key, pl.col(column).alias("reason"))
        .filter(pl.col("reason") != "")
        .with_columns(pl.col("reason").cast(pl.Utf8).str.split(REASON_SEPARATOR))
        .explode("reason")
        .with_columns(pl.col("reason").str.strip_chars())
        .filter(pl.col("reason") != "")
    )
    distinct = long["reason"].unique()
    kinds = pl.DataFrame(
        {"reason": distinct, "kind": [reason_kind(r) for r in distinct.to_list()]},
        schema={"reason": pl.Utf8, "kind": pl.Utf8},
    )
    return long.join(kinds, on="reason").select("key", "kind", "reason")


def top_reasons(window: pl.DataFrame, key: pl.Expr, limit: int = TOP_REASONS) -> pl.DataFrame:
    """Per group key, its most common kinds of flag reason as "reason (count)", most common first.

    A document's reason field may hold several reasons joined by "; "; each counts on its own.
    Reasons are counted by kind: the scorer's rule key when the table has one (`doorway`,
    `legacy`, `skeleton`, ...), else the text without its numbers and samples (`reason_kind`),
    so "top 2-gram covers 25% ..." and "top 2-gram covers 26% ..." are one reason; the kind's
    most common exact string stands for it.
    """
    long = pl.concat(
        [
            _keyed_reasons(window, key, column)
            if RULE_COLUMNS[column] in window.columns
            else _texted_reasons(window, key, column)
            for column in RULE_COLUMNS
        ]
    )
    if long.height == 0:
        return pl.DataFrame(schema={"key": pl.Utf8, "top_reasons": pl.List(pl.Utf8)})
    exact = long.group_by("key", "kind", "reason").len()
    return (
        exact.sort(["key", "kind", "len", "reason"], descending=[False, False, True, False])
        .group_by("key", "kind", maintain_order=True)
        .agg(pl.col("reason").first().str.slice(0, 80), pl.col("len").sum())
        .sort(["key", "len", "reason"], descending=[False, True, False])
        .group_by("key", maintain_order=True)
        .agg(
            (pl.col("reason") + " (" + pl.col("len").cast(pl.Utf8) + ")")
            .head(limit)
            .alias("top_reasons")
        )
    )


def cluster_sources(
    window_docs: pl.DataFrame,
    baseline_docs: pl.DataFrame,
    facets: list[str] | None = None,
    design: SampleDesign | None = None,
) -> pl.DataFrame:
    """One row per (facet, value) present in the window, with its statistics (see stats.py).

    Groups whose window documents and baseline documents are exactly the same set as an earlier
    facet's group (a crawl batch that is a whole file, a dataset with one source) are merged
    into that row and named in its `aliases`, so one source is not reported twice. `members` /
    `flagged_members` list the `_row` positions (0-based rows of `window_docs`) of its window
    documents / of those flagged; the verdict step reads them, the report does not print them.
    `main_dataset` is the dataset most of its documents come from. The `verdict` column is
    filled by `assign_verdicts`.

    `design`: the documents were sampled (forensics.cluster.sample): both tables hold every
    document of their side, `_u` its permanent random number and `_scored` whether it was
    scored (the others have null scores). A group whose documents were all scored counts them
    exactly; any other group estimates its flagged, garbage and spam counts from its own sample
    (the `sample_docs` documents with the smallest `_u`), and so do the window's and the
    baseline's flagged totals (summed over their datasets). Added columns: `scored_docs` and
    `flagged_low` / `flagged_high`, the flagged rate's 95% interval (the rate itself where exact).
    A group whose own sample was not all scored (a fine facet's group the census did not show
    over-represented: forensics.cluster.sample) is tested with the others (the corrected
    p-values are those of every group) and then left out: `unjudged_groups` counts them.
    """
    window = prepare_docs(window_docs, "window documents", text=False, scores=False)
    baseline = prepare_docs(baseline_docs, "baseline documents", text=False, scores=False)
    facets = resolve_facets(window, baseline, facets)
    if window.height == 0:
        raise ForensicsError("window documents: the table is empty; nothing to cluster")
    if baseline.height == 0:
        raise ForensicsError(
            "baseline documents: the table is empty; pick a baseline window that consumed data"
        )
    if not facets:
        return empty_clusters()

    sig_w = _signature_columns(window.height, seed=1)
    sig_b = _signature_columns(baseline.height, seed=2)
    window = window.with_columns(pl.Series("_s1", sig_w[0]), pl.Series("_s2", sig_w[1]))
    baseline = baseline.with_columns(pl.Series("_s1", sig_b[0]), pl.Series("_s2", sig_b[1]))

    if design is not None:
        window = _with_own_sample(window, facets, design)
    parts = [_facet_groups(window, baseline, facet, design) for facet in facets]
    groups = pl.concat(parts, how="vertical_relaxed")
    groups = _merge_aliases(groups)
    n_flagged_window, n_flagged_baseline = int(window["_flag"].sum()), int(baseline["_flag"].sum())
    if design is not None:
        n_flagged_window = estimated_flagged(window, design)
        n_flagged_baseline = estimated_flagged(baseline, design)

    stats = group_statistics(
        docs=groups["docs"].to_numpy(),
        flagged=groups["flagged"].to_numpy(),
        garbage=groups["garbage"].to_numpy(),
        spam=groups["spam"].to_numpy(),
        baseline_docs=groups["baseline_docs"].to_numpy(),
        n_window=window.height,
        n_baseline=baseline.height,
        n_flagged_window=n_flagged_window,
        n_flagged_baseline=n_flagged_baseline,
    )
    out = groups.with_columns(
        pl.Series("id", [f"s{i}" for i in range(groups.height)]),
        pl.lit("source").alias("kind"),
        *[pl.Series(name, values) for name, values in stats.items()],
    )
    extra = []
    if design is not None:
        out, extra = _with_intervals(out), ["scored_docs", "flagged_low", "flagged_high"]
        out = out.filter(pl.col("_judged"))
    return out.select(*CLUSTER_COLUMNS, "main_dataset", *extra).with_columns(
        pl.col("docs").cast(pl.Int64),
        pl.col("baseline_docs").cast(pl.Int64),
        pl.col("flagged").cast(pl.Int64),
    )


def unjudged_groups(window_docs: pl.DataFrame, design: SampleDesign) -> int:
    """The window's groups `cluster_sources` leaves out under `design`: neither scored whole nor
    with their own sample scored."""
    window = prepare_docs(window_docs, "window documents", text=False, scores=False)
    facets = resolve_facets(window, window, None)
    window = _with_own_sample(window, facets, design)
    left_out = 0
    for facet in facets:
        own = pl.col(f"_own_{facet}")
        judged = pl.col("_scored").all() | (own & pl.col("_scored")).sum().ge(own.sum())
        groups = window.group_by(facet_key(facet, window)).agg(judged.alias("judged"))
        left_out += int((~groups["judged"]).sum())
    return left_out


def _with_intervals(out: pl.DataFrame) -> pl.DataFrame:
    """`flagged_low` / `flagged_high`: each group's flagged rate's interval from its own sample
    (`_sample_flagged` of `scored_docs`), or the rate itself where every document was scored."""
    low, high = flagged_interval(out["_sample_flagged"].to_numpy(), out["scored_docs"].to_numpy())
    exact = (out["scored_docs"] >= out["docs"]).to_numpy()
    rate = out["flagged_rate"].to_numpy()
    return out.with_columns(
        pl.Series("flagged_low", np.where(exact, rate, low)),
        pl.Series("flagged_high", np.where(exact, rate, high)),
        pl.col("scored_docs").cast(pl.Int64),
    )


def _with_own_sample(window: pl.DataFrame, facets: list[str], design: SampleDesign) -> pl.DataFrame:
    """`_own_<facet>`: the row is in its group's own sample for that facet."""
    return window.with_columns(
        own_sample(window, design.sample_docs, facet_key(facet, window)).alias(f"_own_{facet}")
        for facet in facets
    )


def estimated_flagged(table: pl.DataFrame, design: SampleDesign) -> int:
    """The table's flagged documents: counted per dataset where all were scored, else its own
    sample's flagged share times its documents."""
    per = (
        table.with_columns(own_sample(table, design.sample_docs, pl.col("dataset")))
        .group_by("dataset")
        .agg(
            pl.len().alias("n"),
            pl.col("_scored").all().alias("complete"),
            pl.col("_flag").sum().alias("all"),
            pl.col("_own").sum().alias("own"),
            (pl.col("_own") & pl.col("_flag")).sum().alias("own_flagged"),
        )
    )
    total = 0.0
    for n, complete, flagged, own, own_flagged in per.select(
        "n", "complete", "all", "own", "own_flagged"
    ).rows():
        total += flagged if complete else own_flagged * n / max(own, 1)
    return int(round(total))


def _facet_groups(
    window: pl.DataFrame, baseline: pl.DataFrame, facet: str, design: SampleDesign | None = None
) -> pl.DataFrame:
    """One row per value of `facet` in the window: its window counts and members, its baseline
    documents, its top reasons, and the member signature sums (`_w1` ... `_b2`) that
    `_merge_aliases` compares; biggest first. With `design`, the counts of a group not scored
    whole are its own sample's, scaled to its documents (`cluster_sources`)."""
    key = facet_key(facet, window)
    sampled = []
    if design is not None:
        own = pl.col(f"_own_{facet}")
        sampled = [
            pl.col("_scored").all().alias("_complete"),
            own.sum().alias("_own"),
            (own & pl.col("_scored")).sum().alias("_own_scored"),
            (own & pl.col("_flag")).sum().alias("_own_flagged"),
            (own & pl.col("_garbage")).sum().alias("_own_garbage"),
            (own & pl.col("_spam")).sum().alias("_own_spam"),
        ]
    win = window.group_by(key).agg(
        *sampled,
        pl.len().alias("docs"),
        pl.col("_flag").sum().alias("flagged"),
        pl.col("_garbage").sum().alias("garbage"),
        pl.col("_spam").sum().alias("spam"),
        pl.col("_row").cast(pl.Int64).alias("members"),
        pl.col("_row").filter(pl.col("_flag")).cast(pl.Int64).alias("flagged_members"),
        pl.col("dataset").cast(pl.Utf8).mode().sort().first().alias("main_dataset"),
        pl.col("_s1").cast(pl.Int64).sum().alias("_w1"),
        pl.col("_s2").cast(pl.Int64).sum().alias("_w2"),
    )
    win = _string_key(win)
    if design is not None:
        win = _scaled_counts(win)
    base = baseline.group_by(facet_key(facet, baseline)).agg(
        pl.len().alias("baseline_docs"),
        pl.col("_s1").cast(pl.Int64).sum().alias("_b1"),
        pl.col("_s2").cast(pl.Int64).sum().alias("_b2"),
    )
    return (
        win.join(_string_key(base), on="key", how="left")
        .join(_string_key(top_reasons(window, key)), on="key", how="left")
        .with_columns(
            pl.lit(facet).alias("facet"),
            pl.col("baseline_docs").fill_null(0),
            pl.col("_b1").fill_null(0),
            pl.col("_b2").fill_null(0),
            pl.col("top_reasons").fill_null(pl.lit([], dtype=pl.List(pl.Utf8))),
        )
        .sort(["docs", "key"], descending=[True, False])
    )


def _scaled_counts(win: pl.DataFrame) -> pl.DataFrame:
    """A group's flagged, garbage and spam counts: exact where all its documents were scored,
    else its own sample's scaled to its documents; `scored_docs` and `_sample_flagged` (the
    counts its interval is computed from)."""
    complete = pl.col("_complete")
    scale = pl.col("docs") / pl.max_horizontal(pl.col("_own"), pl.lit(1))

    def count(name: str) -> pl.Expr:
        estimate = (pl.col(f"_own_{name}") * scale).round(0).cast(pl.Int64)
        return pl.when(complete).then(pl.col(name).cast(pl.Int64)).otherwise(estimate).alias(name)

    return (
        win.with_columns(
            (complete | (pl.col("_own_scored") >= pl.col("_own"))).alias("_judged"),
            pl.when(complete).then(pl.col("docs")).otherwise(pl.col("_own")).alias("scored_docs"),
            pl.when(complete)
            .then(pl.col("flagged"))
            .otherwise(pl.col("_own_flagged"))
            .cast(pl.Int64)
            .alias("_sample_flagged"),
        )
        .with_columns(count("flagged"), count("garbage"), count("spam"))
        .drop("_complete", "_own", "_own_scored", "_own_flagged", "_own_garbage", "_own_spam")
    )


def _merge_aliases(groups: pl.DataFrame) -> pl.DataFrame:
    """Of groups with identical window and baseline member sets keep one (NAME_PREFERENCE)."""
    fingerprint = ["docs", "_w1", "_w2", "baseline_docs", "_b1", "_b2"]
    rank = {facet: i for i, facet in enumerate(NAME_PREFERENCE)}
    named = (
        groups.with_row_index("_pos")
        .with_columns(
            pl.col("facet").replace_strict(rank, default=len(rank)).alias("_pref"),
            (pl.col("facet") + "=" + pl.col("key")).alias("_name"),
        )
        .sort(["_pref", "_pos"])
        .with_row_index("_order")
    )
    firsts = named.group_by(fingerprint).agg(
        pl.col("_order").min().alias("_keep"),
        pl.col("_name").sort_by("_order").slice(1).alias("aliases"),
    )
    kept = (
        named.join(firsts, on=fingerprint, how="left")
        .filter(pl.col("_order") == pl.col("_keep"))
        .sort("_pos")
    )
    return kept.drop("_pos", "_pref", "_order", "_keep", "_name", "_w1", "_w2", "_b1", "_b2")


def empty_clusters() -> pl.DataFrame:
    """A cluster table with no rows and the full schema (a window with no facets, no sample)."""
    return pl.DataFrame(
        schema={
            "id": pl.Utf8,
            "kind": pl.Utf8,
            "facet": pl.Utf8,
            "key": pl.Utf8,
            "docs": pl.Int64,
            "baseline_docs": pl.Int64,
            "window_share": pl.Float64,
            "baseline_share": pl.Float64,
            "enrichment": pl.Float64,
            "p_value": pl.Float64,
            "new_in_window": pl.Boolean,
            "flagged": pl.Int64,
            "flagged_rate": pl.Float64,
            "garbage_rate": pl.Float64,
            "spam_rate": pl.Float64,
            "rest_flagged_rate": pl.Float64,
            "flag_p_value": pl.Float64,
            "baseline_flagged_rate": pl.Float64,
            "baseline_flag_p_value": pl.Float64,
            "suspicion": pl.Float64,
            "top_reasons": pl.List(pl.Utf8),
            "aliases": pl.List(pl.Utf8),
            "members": pl.List(pl.Int64),
            "flagged_members": pl.List(pl.Int64),
        }
    )
