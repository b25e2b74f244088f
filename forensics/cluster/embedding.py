"""Embedding clusters: what the window's documents are about, not where they came from.

Why: a template farm or a mojibake wave can be spread over many sources (so no facet value
stands out) yet its documents land together in embedding space. The pipeline is the one the
anchors measured as fast enough on 2 CPU cores: all-MiniLM-L6-v2 (sentence-transformers, 128
tokens) -> PCA to 50 dims -> MiniBatchKMeans.

Embedding every document is too slow on a CPU (about 40 documents per CPU-second), so we embed
a capped, stratified sample: every flagged document (while they fit in half of the side's
budget, else a random half-budget of them) plus a random sample of the unflagged rest, from the
window (2/3 of the cap) and the baseline (1/3). Each sampled document carries a weight (its
stratum's size / its stratum's sample size), so cluster shares are unbiased estimates of the
full window's. Over-representation is tested on those estimates with their stratified sampling
variance (a normal approximation, `stats.stratified_share_p`), not with the exact test, which
would take estimates for counts. The model and the embedding cache (a rerun embeds nothing it
has seen) are `embedder.py`'s.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl

from forensics.cluster.embedder import (
    MINILM_CAP,
    Embedder,
    default_cap,
    embed_texts,
    make_embedder,
)
from forensics.cluster.source import (
    CLUSTER_COLUMNS,
    DEFAULT_FACETS,
    empty_clusters,
    prepare_docs,
    top_reasons,
)
from forensics.cluster.stats import group_statistics, stratified_share_p
from forensics.cluster.texts import ScoredTexts, with_texts
from forensics.errors import ForensicsError

WINDOW_FRACTION = 2 / 3
PCA_DIMS = 50
DOMINANT_SOURCES = 3


def stratified_sample(
    flagged: np.ndarray, budget: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Positions to embed and their weights: flagged documents first, then a random rest.

    Flagged documents take at most half the budget unless the unflagged ones cannot fill the
    other half. The weight of a sampled document is (its stratum's size) / (sampled from that
    stratum), so weights sum to the number of documents: weighted counts estimate full counts.
    """
    flagged = np.asarray(flagged, dtype=bool)
    f_idx = np.flatnonzero(flagged)
    u_idx = np.flatnonzero(~flagged)
    budget = max(0, int(budget))
    f_take = min(f_idx.size, max(budget // 2, budget - u_idx.size))
    u_take = min(u_idx.size, budget - f_take)
    f_pick = np.sort(rng.choice(f_idx, size=f_take, replace=False)) if f_take else f_idx[:0]
    u_pick = np.sort(rng.choice(u_idx, size=u_take, replace=False)) if u_take else u_idx[:0]
    weights = np.concatenate(
        [
            np.full(f_take, f_idx.size / max(f_take, 1)),
            np.full(u_take, u_idx.size / max(u_take, 1)),
        ]
    )
    return np.concatenate([f_pick, u_pick]).astype(np.int64), weights


def split_cap(cap: int, n_window: int, n_baseline: int) -> tuple[int, int]:
    """The cap split 2/3 window, 1/3 baseline; what one side cannot use goes to the other."""
    w = min(n_window, int(round(cap * WINDOW_FRACTION)))
    b = min(n_baseline, cap - w)
    w = min(n_window, cap - b)
    return w, b


def default_k(n: int) -> int:
    """Clusters for n embedded documents: about sqrt(n / 2), between 2 and 48."""
    return int(np.clip(round(np.sqrt(n / 2)), 2, 48))


def cluster_embeddings(
    window_docs: pl.DataFrame,
    baseline_docs: pl.DataFrame,
    cap: int | None = None,
    model: str | os.PathLike[str] | None = None,
    device: str = "cpu",
    cache_dir: Path | None = None,
    seed: int = 0,
    k: int | None = None,
    embedder: Embedder | Callable[[list[str]], np.ndarray] | None = None,
    facets: list[str] | None = None,
    progress: bool = True,
    texts: ScoredTexts | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Embed a stratified sample of window + baseline, cluster it, and score every cluster.

    Returns (clusters, assignments). `clusters` has the source-cluster columns (see
    source.CLUSTER_COLUMNS; `docs`/`baseline_docs`/`flagged` are weighted estimates for the
    full tables) plus `embedded` (window documents embedded in the cluster) and
    `dominant_sources` ("facet=value (share)" of its window documents, top 3).
    `assignments` has one row per embedded document: `side` ("window"/"baseline"), `row`
    (0-based row in its table), `dataset`, `doc_id`, `cluster` (e.g. "e3"), `weight` (documents
    it stands for), `flagged`, `garbage_score`, `spam_score`, and `x`, `y` (first two principal
    components, for the 2-D plot). `model`/`device`: see `make_embedder`; `cap` None: the
    embedder's default (`default_cap`). `embedder` replaces the model (tests, benchmarks).
    `texts`: where the tables hold no texts, the store the embedded documents' are read from
    (forensics.cluster.texts).
    """
    held = texts is None or "text" in window_docs.columns
    window = prepare_docs(window_docs, "window documents", text=held)
    baseline = prepare_docs(baseline_docs, "baseline documents", text=held)
    if cap is None:
        cap = default_cap(model, device) if embedder is None else MINILM_CAP
    if cap < 2:
        raise ForensicsError(f"--embed-cap {cap}: must be at least 2")
    rng = np.random.default_rng(seed)
    w_budget, b_budget = split_cap(cap, window.height, baseline.height)
    w_pos, w_weight = stratified_sample(window["_flag"].to_numpy(), w_budget, rng)
    b_pos, b_weight = stratified_sample(baseline["_flag"].to_numpy(), b_budget, rng)
    if w_pos.size + b_pos.size < 3 or w_pos.size == 0:
        return _with_embedding_columns(empty_clusters()), _empty_assignments()

    shown = _texts_at(window, w_pos, texts) + _texts_at(baseline, b_pos, texts)
    if embedder is None:
        embedder = make_embedder(model, device, quiet=not progress)
    vectors, _hits = embed_texts(shown, embedder, cache_dir, progress=progress)
    reduced, labels = _reduce_and_cluster(vectors, seed, k)
    assignments = _assignments(
        window, baseline, (w_pos, w_weight), (b_pos, b_weight), labels, reduced
    )
    clusters = _cluster_table(window, baseline, assignments, w_pos, labels[: w_pos.size], facets)
    return clusters, assignments


def _texts_at(table: pl.DataFrame, rows: np.ndarray, texts: ScoredTexts | None) -> list[str]:
    """The texts of `table`'s `rows` ("" where there is none): its own, or read from `texts`."""
    picked = table.select([c for c in ("dataset", "doc_id", "text") if c in table.columns])
    return with_texts(picked.gather(rows), texts)["text"].fill_null("").to_list()


def _reduce_and_cluster(
    vectors: np.ndarray, seed: int, k: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """(the vectors in PCA_DIMS principal components, each one's k-means cluster number)."""
    from sklearn.cluster import MiniBatchKMeans
    from sklearn.decomposition import PCA

    n = vectors.shape[0]
    dims = max(2, min(PCA_DIMS, n - 1, vectors.shape[1]))
    reduced = PCA(n_components=dims, random_state=seed).fit_transform(vectors)
    n_clusters = min(k or default_k(n), n)
    km = MiniBatchKMeans(n_clusters=n_clusters, random_state=seed, n_init=3, batch_size=1024).fit(
        reduced
    )
    return reduced, km.labels_.astype(np.int64)


def _assignments(
    window: pl.DataFrame,
    baseline: pl.DataFrame,
    w_sample: tuple[np.ndarray, np.ndarray],
    b_sample: tuple[np.ndarray, np.ndarray],
    labels: np.ndarray,
    reduced: np.ndarray,
) -> pl.DataFrame:
    """One row per embedded document, window rows first (see `cluster_embeddings`); each side's
    sample is (positions in its table, weights)."""
    (w_pos, w_weight), (b_pos, b_weight) = w_sample, b_sample
    side = np.array(["window"] * w_pos.size + ["baseline"] * b_pos.size)
    flagged = np.concatenate(
        [window["_flag"].to_numpy()[w_pos], baseline["_flag"].to_numpy()[b_pos]]
    )
    return pl.DataFrame(
        {
            "side": side,
            "row": np.concatenate([w_pos, b_pos]),
            "dataset": window["dataset"].gather(w_pos).to_list()
            + baseline["dataset"].gather(b_pos).to_list(),
            "doc_id": np.concatenate(
                [window["doc_id"].to_numpy()[w_pos], baseline["doc_id"].to_numpy()[b_pos]]
            ).astype(np.int64),
            "cluster": [f"e{c}" for c in labels],
            "weight": np.concatenate([w_weight, b_weight]),
            "flagged": flagged,
            "garbage_score": np.concatenate(
                [
                    window["garbage_score"].to_numpy()[w_pos],
                    baseline["garbage_score"].to_numpy()[b_pos],
                ]
            ),
            "spam_score": np.concatenate(
                [window["spam_score"].to_numpy()[w_pos], baseline["spam_score"].to_numpy()[b_pos]]
            ),
            "x": reduced[:, 0].astype(np.float32),
            "y": reduced[:, 1].astype(np.float32),
        }
    )


def _cluster_table(
    window: pl.DataFrame,
    baseline: pl.DataFrame,
    assignments: pl.DataFrame,
    w_pos: np.ndarray,
    w_labels: np.ndarray,
    facets: list[str] | None,
) -> pl.DataFrame:
    """Weighted per-cluster counts -> the same statistics as source clusters."""
    groups = _cluster_groups(window, assignments, w_pos, w_labels, facets)
    stats = _weighted_statistics(groups, window, baseline, assignments)
    out = groups.with_columns(
        pl.col("cluster").alias("id"),
        pl.col("cluster").alias("key"),
        pl.lit("embedding").alias("kind"),
        pl.lit(None, dtype=pl.Utf8).alias("facet"),
        pl.col("w_docs").round(0).cast(pl.Int64).alias("docs"),
        pl.col("b_docs").round(0).cast(pl.Int64).alias("baseline_docs"),
        pl.col("w_flagged").round(0).cast(pl.Int64).alias("flagged"),
        pl.lit([], dtype=pl.List(pl.Utf8)).alias("aliases"),
        *[pl.Series(name, values) for name, values in stats.items()],
    )
    return out.select(*CLUSTER_COLUMNS, "embedded", "dominant_sources")


def _cluster_groups(
    window: pl.DataFrame,
    assignments: pl.DataFrame,
    w_pos: np.ndarray,
    w_labels: np.ndarray,
    facets: list[str] | None,
) -> pl.DataFrame:
    """One row per cluster (in cluster number order): embedded, the weighted window counts
    (w_docs, w_flagged, w_garbage, w_spam), the weighted baseline count b_docs, members,
    flagged_members, top_reasons and dominant_sources."""
    win_rows = window.gather(w_pos).with_columns(
        pl.Series("cluster", [f"e{c}" for c in w_labels]),
        pl.Series("_w", assignments["weight"].head(w_pos.size)),
    )
    win = win_rows.group_by("cluster").agg(
        pl.len().alias("embedded"),
        pl.col("_w").sum().alias("w_docs"),
        (pl.col("_w") * pl.col("_flag")).sum().alias("w_flagged"),
        (pl.col("_w") * pl.col("_garbage")).sum().alias("w_garbage"),
        (pl.col("_w") * pl.col("_spam")).sum().alias("w_spam"),
        pl.col("_row").cast(pl.Int64).alias("members"),
        pl.col("_row").filter(pl.col("_flag")).cast(pl.Int64).alias("flagged_members"),
    )
    base = (
        assignments.filter(pl.col("side") == "baseline")
        .group_by("cluster")
        .agg(pl.col("weight").sum().alias("b_docs"))
    )
    all_ids = assignments.select("cluster").unique()
    return (
        all_ids.join(win, on="cluster", how="left")
        .join(base, on="cluster", how="left")
        .join(
            top_reasons(win_rows, pl.col("cluster").alias("key")).rename({"key": "cluster"}),
            on="cluster",
            how="left",
        )
        .join(_dominant_sources(win_rows, facets), on="cluster", how="left")
        .with_columns(
            pl.col("embedded").fill_null(0),
            pl.col("w_docs", "w_flagged", "w_garbage", "w_spam", "b_docs").fill_null(0.0),
            pl.col("members", "flagged_members").fill_null(pl.lit([], dtype=pl.List(pl.Int64))),
            pl.col("top_reasons").fill_null(pl.lit([], dtype=pl.List(pl.Utf8))),
            pl.col("dominant_sources").fill_null(pl.lit([], dtype=pl.List(pl.Utf8))),
        )
        .with_columns(pl.col("cluster").str.slice(1).cast(pl.Int64).alias("_n"))
        .sort("_n")
    )


def _weighted_statistics(
    groups: pl.DataFrame, window: pl.DataFrame, baseline: pl.DataFrame, assignments: pl.DataFrame
) -> dict[str, np.ndarray]:
    """The source clusters' statistics (stats.group_statistics) from the weighted estimates."""
    n_w, n_b = window.height, max(baseline.height, 1)
    ids = groups["cluster"].to_list()
    share_w, var_w = _share_and_variance(assignments, "window", window, ids)
    share_b, var_b = _share_and_variance(assignments, "baseline", baseline, ids)
    rounded = {name: np.rint(groups[col].to_numpy()).astype(np.int64)
               for name, col in (("docs", "w_docs"), ("flagged", "w_flagged"),
                                 ("garbage", "w_garbage"), ("spam", "w_spam"))}  # fmt: skip
    stats = group_statistics(
        docs=rounded["docs"],
        flagged=np.minimum(rounded["flagged"], rounded["docs"]),
        garbage=np.minimum(rounded["garbage"], rounded["docs"]),
        spam=np.minimum(rounded["spam"], rounded["docs"]),
        baseline_docs=np.rint(groups["b_docs"].to_numpy()).astype(np.int64),
        n_window=n_w,
        n_baseline=n_b,
        n_flagged_window=int(window["_flag"].sum()),
        n_flagged_baseline=int(baseline["_flag"].sum()),
        enrichment_raw_p=stratified_share_p(share_w, var_w, share_b, var_b, n_w, n_b),
    )
    # Shares and rates from the weighted estimates (unbiased), not from the rounded counts.
    w_docs = groups["w_docs"].to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        stats["window_share"] = share_w
        stats["baseline_share"] = share_b
        for rate, col in (("flagged_rate", "w_flagged"), ("garbage_rate", "w_garbage"),
                          ("spam_rate", "w_spam")):  # fmt: skip
            stats[rate] = np.where(
                w_docs > 0, groups[col].to_numpy() / np.maximum(w_docs, 1e-12), 0
            )
    stats["new_in_window"] = (groups["b_docs"].to_numpy() == 0) & (w_docs > 0)
    return stats


def _share_and_variance(
    assignments: pl.DataFrame, side: str, docs: pl.DataFrame, ids: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Per cluster (in `ids` order): estimated share of the side's documents, and its variance.

    Strata are flagged / unflagged documents. share = sum over strata of (N_s / N) x (sampled
    in cluster / sampled); variance = sum of (N_s / N)^2 (1 - n_s / N_s) p (1 - p) / (n_s - 1),
    zero for a stratum embedded in full (the usual case for flagged documents).
    """
    n_total = docs.height
    share = np.zeros(len(ids))
    var = np.zeros(len(ids))
    if n_total == 0:
        return share, var
    index = {c: i for i, c in enumerate(ids)}
    sampled = assignments.filter(pl.col("side") == side)
    for flag in (True, False):
        stratum_size = int((docs["_flag"] == flag).sum())
        part = sampled.filter(pl.col("flagged") == flag)
        n_s = part.height
        if n_s == 0 or stratum_size == 0:
            continue
        counts = np.zeros(len(ids))
        for cluster, count in part.group_by("cluster").len().iter_rows():
            counts[index[cluster]] = count
        p = counts / n_s
        weight = stratum_size / n_total
        share += weight * p
        fpc = max(0.0, 1.0 - n_s / stratum_size)
        var += weight**2 * fpc * p * (1 - p) / max(n_s - 1, 1)
    return share, var


def _dominant_sources(win_rows: pl.DataFrame, facets: list[str] | None) -> pl.DataFrame:
    """Per cluster, the top value of each facet among its window documents, weighted, top 3."""
    names = [f for f in (facets or DEFAULT_FACETS) if f in win_rows.columns]
    if not names:
        return pl.DataFrame(schema={"cluster": pl.Utf8, "dominant_sources": pl.List(pl.Utf8)})
    parts = []
    for facet in names:
        shares = (
            win_rows.group_by("cluster", pl.col(facet).cast(pl.Utf8).fill_null("(none)").alias("v"))
            .agg(pl.col("_w").sum())
            .with_columns((pl.col("_w") / pl.col("_w").sum().over("cluster")).alias("share"))
            # shares rounded for the order: equal shares summed in another order differ in their
            # last bits, and the tie must fall to the name, the same on every run
            .sort(
                [pl.col("cluster"), pl.col("share").round(9), pl.col("v")],
                descending=[False, True, False],
            )
            .group_by("cluster", maintain_order=True)
            .first()
            .with_columns(pl.lit(facet).alias("facet"))
        )
        parts.append(shares)
    return (
        pl.concat(parts)
        .sort(
            [pl.col("cluster"), pl.col("share").round(9), pl.col("facet")],
            descending=[False, True, False],
        )
        .group_by("cluster", maintain_order=True)
        .agg(
            (
                pl.col("facet")
                + "="
                + pl.col("v")
                + " ("
                + (pl.col("share") * 100).round(0).cast(pl.Int64).cast(pl.Utf8)
                + "%)"
            )
            .head(DOMINANT_SOURCES)
            .alias("dominant_sources")
        )
    )


def _with_embedding_columns(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns(
        pl.lit(0, dtype=pl.Int64).alias("embedded"),
        pl.lit([], dtype=pl.List(pl.Utf8)).alias("dominant_sources"),
    ).clear()


def _empty_assignments() -> pl.DataFrame:
    return pl.DataFrame(
        schema={
            "side": pl.Utf8,
            "row": pl.Int64,
            "dataset": pl.Utf8,
            "doc_id": pl.Int64,
            "cluster": pl.Utf8,
            "weight": pl.Float64,
            "flagged": pl.Boolean,
            "garbage_score": pl.Float64,
            "spam_score": pl.Float64,
            "x": pl.Float32,
            "y": pl.Float32,
        }
    )


def describe_sample(assignments: pl.DataFrame, cap: int) -> dict[str, int | str]:
    """The embedding sample note for the report: how many embedded of how many, and the cap."""
    sides = {}
    for side in ("window", "baseline"):
        part = assignments.filter(pl.col("side") == side)
        sides[side] = (part.height, int(round(float(part["weight"].sum() or 0))))
    flagged = int(assignments.filter((pl.col("side") == "window") & pl.col("flagged")).height)
    text = (
        f"embedded {sides['window'][0]:,} of {sides['window'][1]:,} window documents "
        f"({flagged:,} flagged, the rest a random sample) and {sides['baseline'][0]:,} of "
        f"{sides['baseline'][1]:,} baseline documents (cap {cap:,}); embedding-cluster counts "
        "are weighted estimates for the full window"
    )
    return {
        "embedded_window": sides["window"][0],
        "window_docs": sides["window"][1],
        "embedded_baseline": sides["baseline"][0],
        "baseline_docs": sides["baseline"][1],
        "flagged_embedded": flagged,
        "cap": cap,
        "text": text,
    }
