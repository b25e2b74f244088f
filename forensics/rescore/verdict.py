"""Model-side evidence per cluster, and how it combines with the data-side verdict.

Each cluster gets, over the scored window samples holding its documents:
- loss_z:        mean z of its documents' segment losses (per-sample losses only: of the samples'),
- max_token_z:   mean z of their worst-token losses,
- grad_norm_z:   mean z of the gradient norms of the samples holding them (--grad-norm).
Under "no different from the baseline" a mean of n unit-variance z's has sd 1/sqrt(n), so the
cluster's surprise is tested with z_mean * sqrt(n), one-sided, Bonferroni over the measures at
hand; for a data-side culprit that is all (one hypothesis, chosen before the model ran), any
other cluster is also corrected for the number of clusters tested (a search). Segments of one
sample are not independent, so the test is an approximation;
the effect size threshold (MODEL_Z) keeps big, barely-different clusters from counting.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl

from forensics.report.contents import cluster_name, format_p
from forensics.rescore.naming import NAMING_RULE
from forensics.rescore.stage import Rescore

MODEL_Z = 0.5  # the cluster's mean z must be at least this (half a baseline sd) ...
P_MAX = 1e-3  # ... and significant after Bonferroni
MIN_UNITS = 3  # scored segments (or samples) a cluster needs for a model-side call
MEASURES = ("loss_z", "max_token_z", "grad_norm_z")

MODEL_RULE = (
    f"model-side: a cluster surprised the model when the mean z (vs the baseline samples scored by "
    f"the same checkpoint) of its segment loss, worst-token loss or sample gradient norm is >= "
    f"{MODEL_Z:g} and z_mean x sqrt(n) is significant (one-sided, p < {P_MAX:g}, Bonferroni over "
    "the measures; for clusters other than the data-side culprits also over the clusters tested), "
    f"with at least {MIN_UNITS} scored segments. Combined: a data-side "
    "culprit the model was surprised by is 'culprit, confirmed by the model'; a data-side culprit "
    "the model was not surprised by becomes 'suspect: new and dirty, but the model was not "
    "surprised' (not blamed, not skipped); suspects and clean clusters keep their verdict, with "
    "the model's numbers beside them. Without a checkpoint or losses file the verdict is the "
    "data side's alone."
)


def _units(result: Rescore) -> pl.DataFrame:
    """One row per scored window (dataset, doc_id, row) with its z's."""
    samples = result.samples.filter(pl.col("side") == "window").select(
        "row", "loss_z", "max_token_z", "grad_norm_z"
    )
    segs = result.segments.filter(pl.col("row").is_in(samples["row"].implode()))
    if result.token_level:
        units = segs.select("row", "dataset", "doc_id", "loss_z", "max_token_z").join(
            samples.select("row", "grad_norm_z"), on="row"
        )
        return units.filter(pl.col("loss_z").is_not_null())
    return segs.select("row", "dataset", "doc_id").unique().join(samples, on="row")


def _p(mean: float | None, n: int) -> float:
    if mean is None or not math.isfinite(mean) or n <= 0:
        return 1.0
    return 0.5 * math.erfc(mean * math.sqrt(n) / math.sqrt(2))


def cluster_evidence(
    ranked: pl.DataFrame, window_docs: pl.DataFrame, result: Rescore
) -> pl.DataFrame:
    """`ranked` plus loss_z, max_token_z, grad_norm_z, model_units, model_p (the smallest
    uncorrected one-sided p of the measures: the ranking key), model_evidence
    ("surprised" / "not surprised" / "too few scored"), data_verdict, and the combined verdict."""
    units = _units(result)
    docs = window_docs.select("dataset", "doc_id").with_row_index("_m")
    members = (
        ranked.select("id", "members")
        .explode("members")
        .drop_nulls("members")
        .join(docs, left_on=pl.col("members").cast(pl.UInt32), right_on="_m")
        .select("id", "dataset", "doc_id")
    )
    joined = members.join(units, on=["dataset", "doc_id"])
    per_unit = joined.group_by("id").agg(
        pl.col("loss_z").mean(),
        pl.col("max_token_z").mean(),
        pl.len().alias("model_units"),
    )
    per_row = (
        joined.unique(["id", "row"])
        .group_by("id")
        .agg(pl.col("grad_norm_z").mean(), pl.len().alias("_rows"))
    )
    stats = per_unit.join(per_row, on="id", how="left")
    out = ranked.join(stats, on="id", how="left").with_columns(
        pl.col("model_units").fill_null(0), pl.col("_rows").fill_null(0)
    )
    measures = sum(1 for m in MEASURES if out[m].null_count() < out.height) or 1
    tested = max(1, int((out["model_units"] >= MIN_UNITS).sum()))
    evidence, best_p = [], []
    rows = out.select(*MEASURES, "model_units", "_rows", "verdict").iter_rows(named=True)
    for r in rows:
        n_units, n_rows = int(r["model_units"]), int(r["_rows"])
        ps = [
            _p(r["loss_z"], n_units),
            _p(r["max_token_z"], n_units),
            _p(r["grad_norm_z"], n_rows),
        ]
        # Confirming a data-side culprit tests one hypothesis chosen before the model was run:
        # corrected over the measures only. Any other cluster is a search over all of them.
        p = min(1.0, min(ps) * measures * (1 if r["verdict"] == "culprit" else tested))
        best_p.append(min(ps))  # uncorrected: ranks every cluster on the same footing
        big = any(r[m] is not None and r[m] >= MODEL_Z for m in MEASURES)
        if n_units < MIN_UNITS:
            evidence.append("too few scored")
        elif big and p < P_MAX:
            evidence.append("surprised")
        else:
            evidence.append("not surprised")
    out = out.with_columns(
        pl.Series("model_p", best_p, dtype=pl.Float64),
        pl.Series("model_evidence", evidence, dtype=pl.Utf8),
        pl.col("verdict").alias("data_verdict"),
    ).drop("_rows")
    return out.with_columns(
        pl.when((pl.col("verdict") == "culprit") & (pl.col("model_evidence") == "not surprised"))
        .then(pl.lit("suspect"))
        .otherwise(pl.col("verdict"))
        .alias("verdict")
    )


def verdict_phrase(row: dict[str, Any]) -> str:
    """How the two sides combined for one cluster, in the report's words."""
    data, ev = row.get("data_verdict"), row.get("model_evidence")
    if row.get("named_by") == "model":
        return "culprit, named by the model (no scorer flags it)"
    if data == "culprit" and ev == "surprised":
        return "culprit, confirmed by the model"
    if data == "culprit" and ev == "not surprised":
        return "suspect: new and dirty, but the model was not surprised"
    if data == "culprit":
        return "culprit (too few of its samples were scored for the model to say)"
    if ev == "surprised":
        return f"{data} by the data, but the model choked on it"
    return str(data)


def _fmt(z: float | None) -> str:
    return "n/a" if z is None or not math.isfinite(z) else f"{z:+.2f}"


def decode_span(tokenizer: Any, tokens: np.ndarray, lo: int, peak: int, hi: int) -> dict[str, str]:
    """The text before the peak token, the peak token and after it (raw; renderers escape)."""

    def dec(ids: np.ndarray) -> str:
        return (
            tokenizer.decode([int(t) for t in ids], skip_special_tokens=False) if len(ids) else ""
        )

    return {
        "before": dec(tokens[lo:peak]),
        "peak": dec(tokens[peak : peak + 1]),
        "after": dec(tokens[peak + 1 : hi]),
    }


def model_view(
    ranked: pl.DataFrame,
    result: Rescore,
    *,
    tokenizer: Any = None,
    top: int = 8,
    context: int = 24,
    window_docs: pl.DataFrame | None = None,
) -> dict[str, Any]:
    """The report's "what the model choked on" section, as plain data (text raw). `named`:
    per group the model named (forensics.rescore.naming), its highest-loss documents."""
    clusters = _model_clusters(ranked)
    window = result.samples.filter(pl.col("side") == "window")
    rank, agreement = _agreement(ranked, clusters)
    return {
        "named": _named_documents(ranked, result, window, window_docs, tokenizer, context),
        "source": result.info.get("source"),
        "level": result.info.get("level"),
        "window_samples": result.info.get("window_samples"),
        "window_samples_total": result.info.get("window_samples_total"),
        "baseline_samples": result.info.get("baseline_samples"),
        "baseline_stats": result.info.get("baseline_stats"),
        "agreement": agreement,
        "culprit_rank_by_model": rank,
        "clusters": clusters,
        "top_samples": _top_samples(result, window, top),
        "top_documents": _top_documents(result, window, tokenizer, top, context),
        "rule": MODEL_RULE + "; " + NAMING_RULE,
    }


def _model_clusters(ranked: pl.DataFrame) -> list[dict[str, Any]]:
    """The clusters the model scored, ranked by the strength of the model's evidence (the test's
    p), then by loss z, clusters with too few scored segments last: a small cluster's mean z is
    noise."""
    scored = (
        ranked.filter(pl.col("model_units") > 0)
        .with_columns((pl.col("model_units") < MIN_UNITS).alias("_few"))
        .sort(
            ["_few", "model_p", "loss_z", "id"],
            descending=[False, False, True, False],
            nulls_last=True,
        )  # fmt: skip
        .drop("_few")
    )
    return [
        {
            "id": r["id"],
            "name": cluster_name(r),
            "verdict": r["verdict"],
            "data_verdict": r["data_verdict"],
            "combined": verdict_phrase(r),
            "loss_z": r["loss_z"],
            "max_token_z": r["max_token_z"],
            "grad_norm_z": r["grad_norm_z"],
            "units": int(r["model_units"]),
            "evidence": r["model_evidence"],
        }
        for r in scored.iter_rows(named=True)
    ]


def _top_samples(result: Rescore, window: pl.DataFrame, top: int) -> list[dict[str, Any]]:
    """The window's `top` samples by loss z, with the documents each holds."""
    docs_of = result.segments.group_by("row", maintain_order=True).agg(
        (pl.col("dataset") + ":" + pl.col("doc_id").cast(pl.Utf8)).alias("documents")
    )
    return (
        window.join(docs_of, on="row", how="left")
        .sort(["loss_z", "row"], descending=[True, False], nulls_last=True)
        .head(top)
        .select(
            "iteration", "position", "loss", "loss_z", "max_token_z", "grad_norm_z", "documents"
        )  # fmt: skip
        .to_dicts()
    )


def _top_documents(
    result: Rescore, window: pl.DataFrame, tokenizer: Any, top: int, context: int
) -> list[dict[str, Any]]:
    """Token-level rescoring only: the `top` documents by loss z, each with the span around its
    worst token decoded when a tokenizer is given."""
    top_docs: list[dict[str, Any]] = []
    if not result.token_level:
        return top_docs
    segs = result.segments.join(window.select("row"), on="row").filter(
        pl.col("loss_z").is_not_null()
    )
    best = (
        segs.sort(["loss_z", "row"], descending=[True, False])
        .unique(["dataset", "doc_id"], keep="first", maintain_order=True)
        .head(top)
    )
    for r in best.iter_rows(named=True):
        entry = {k: r[k] for k in ("dataset", "doc_id", "tokens", "loss", "loss_z",
                                   "max_token_loss", "max_token_z")}  # fmt: skip
        entry["iteration"], entry["position"] = _it_pos(window, r["row"])
        if tokenizer is not None and r["peak_token"] >= 0:
            sample = result.tokens[r["row"]]
            peak = int(r["peak_token"])
            lo = max(int(r["start"]), peak - context)
            hi = min(int(r["end"]), peak + 1 + context // 2)
            entry["span"] = decode_span(tokenizer, sample, lo, peak, hi)
        top_docs.append(entry)
    return top_docs


def _named_documents(
    ranked: pl.DataFrame,
    result: Rescore,
    window: pl.DataFrame,
    window_docs: pl.DataFrame | None,
    tokenizer: Any,
    context: int,
    top: int = 5,
) -> dict[str, list[dict[str, Any]]]:
    """Each model-named group's `top` window documents by loss z (spans decoded as in
    `_top_documents`)."""
    if window_docs is None or "named_by" not in ranked.columns:
        return {}
    named = ranked.filter(pl.col("named_by") == "model")
    docs = window_docs.select("dataset", "doc_id").with_row_index("_m")
    out: dict[str, list[dict[str, Any]]] = {}
    for row in named.iter_rows(named=True):
        keys = docs.filter(pl.col("_m").is_in(row["members"] or [])).select("dataset", "doc_id")
        mine = Rescore(result.samples, result.segments.join(keys, on=["dataset", "doc_id"]),
                       result.tokens, result.info)  # fmt: skip
        out[row["id"]] = _top_documents(mine, window, tokenizer, top, context)
    return out


def _agreement(ranked: pl.DataFrame, clusters: list[dict[str, Any]]) -> tuple[int | None, str]:
    """(the data-side culprit's rank by model evidence alone, a sentence on whether the model
    agrees with the data-side verdict)."""
    culprits = ranked.filter(pl.col("data_verdict") == "culprit")
    named = (
        ranked.filter(pl.col("named_by") == "model") if "named_by" in ranked.columns
        else ranked.head(0)
    )  # fmt: skip
    rank = None
    agreement = "no data-side culprit to compare with"
    if named.height and not culprits.height:
        c = named.row(0, named=True)
        versus = "its own baseline documents" if c["model_reference"] == "own" else "the baseline"
        return None, (
            f"the model, not a scorer, named {cluster_name(c)}: its documents' loss is "
            f"{c['model_effect']:+.2f} baseline sds above {versus}'s (Holm-corrected "
            f"{format_p(c['model_holm_p'])}); no scorer flags it"
        )
    if culprits.height:
        c = culprits.row(0, named=True)
        ids = [x["id"] for x in clusters]
        rank = ids.index(c["id"]) + 1 if c["id"] in ids else None
        agreement = (
            f"{cluster_name(c)}: {verdict_phrase(c)} (loss z {_fmt(c['loss_z'])}, worst-token z "
            f"{_fmt(c['max_token_z'])}, grad-norm z {_fmt(c['grad_norm_z'])}; rank "
            f"{rank if rank else 'n/a'} of {len(ids)} clusters by model-side evidence alone)"
        )
    elif clusters and clusters[0]["evidence"] == "surprised":
        agreement = (
            f"no culprit: the model choked most on {clusters[0]['name']} (loss z "
            f"{_fmt(clusters[0]['loss_z'])}), but no source group that changed stands out "
            "against its own baseline (forensics.rescore.naming); see the table"
        )
    else:
        agreement = "no culprit: no group's loss stands out against the baseline's"
    return rank, agreement


def _it_pos(window: pl.DataFrame, row: int) -> tuple[int, int]:
    hit = window.filter(pl.col("row") == row).row(0, named=True)
    return int(hit["iteration"]), int(hit["position"])
