"""The culprit documents: those of the blamed clusters the window drew, plus every other
document of a blamed source (the block list), and the rollback that goes before them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from dataloaders.trainers import Trainer
from forensics.cluster import culprit_docs
from forensics.cluster.source import MISSING_KEY
from forensics.rollback import NEAR, Mark, Rollback, recommend_rollback
from forensics.score import FLAG_THRESHOLD
from forensics.spike.rule_members import rule_members
from forensics.spike.run_context import SpikeRun
from forensics.window import stage_starts

DOCS_SCHEMA = {"dataset": pl.Utf8, "doc_id": pl.Int64}


@dataclass
class Blame:
    """seen: culprit documents the window drew (dataset, doc_id, cluster); culprit: those plus
    the blamed sources' other documents (the block list); clusters: the blamed cluster ids."""

    seen: pl.DataFrame
    culprit: pl.DataFrame
    clusters: list[str]


def onset_iteration(replay: pl.DataFrame, culprit: pl.DataFrame) -> int | None:
    """First iteration of the replay table holding any culprit document."""
    hit = replay.join(culprit.select("dataset", "doc_id").unique(), on=["dataset", "doc_id"])
    return int(hit["iteration"].min()) if hit.height else None


def documents_by_dataset(culprit: pl.DataFrame) -> dict[str, list[int]]:
    """The block list: per dataset, sorted culprit doc_ids."""
    out: dict[str, list[int]] = {}
    for (name,), part in culprit.group_by(["dataset"], maintain_order=True):
        out[str(name)] = sorted(int(d) for d in part["doc_id"].unique())
    return dict(sorted(out.items()))


def flagged_documents(seen: pl.DataFrame, window_docs: pl.DataFrame) -> pl.DataFrame:
    """The culprit documents of the window whose garbage or spam score is flagged."""
    if not seen.height:
        return seen.select("dataset", "doc_id")
    scores = window_docs.select("dataset", "doc_id", "garbage_score", "spam_score")
    return (
        seen.select("dataset", "doc_id")
        .join(scores, on=["dataset", "doc_id"], how="inner")
        .filter(
            (pl.col("garbage_score") >= FLAG_THRESHOLD) | (pl.col("spam_score") >= FLAG_THRESHOLD)
        )
        .select("dataset", "doc_id")
    )


def source_documents(
    replayer: object, ranked: pl.DataFrame, ids: list[str], notes: list[str]
) -> pl.DataFrame:
    """Every document of the blamed *sources*, not only those the window happened to hold.

    A culprit crawl batch has documents the window never drew; they come later in the run (the
    forward exposure must count them) and belong in the block list. The replayer lists them
    (`documents_by_facet`); a family that cannot says so in `notes`. Embedding clusters have no
    such definition and add nothing here. Returns dataset, doc_id, cluster.
    """
    frames = []
    chosen = ranked.filter(pl.col("id").is_in(ids) & (pl.col("kind") == "source"))
    for row in chosen.select("id", "facet", "key").iter_rows(named=True):
        key = None if row["key"] == MISSING_KEY else row["key"]
        docs = replayer.documents_by_facet(row["facet"], key)  # type: ignore[attr-defined]
        if docs is None:
            notes.append(
                f"the block list holds the documents of {row['id']} the window drew: this data "
                "family cannot list the source's other documents without reading every shard"
            )
            continue
        frames.append(docs.with_columns(pl.lit(row["id"]).alias("cluster")))
    if not frames:
        return pl.DataFrame(schema={**DOCS_SCHEMA, "cluster": pl.Utf8})
    return pl.concat(frames).select("dataset", "doc_id", "cluster")


def blame_stage(
    run: SpikeRun,
    ranked: pl.DataFrame,
    window_docs: pl.DataFrame,
    culprits: tuple[str, ...] | None = None,
) -> Blame:
    """The culprit documents, from the verdicts (or `culprits`, the cluster ids of
    `--culprit`), with the window documents of a blamed embedding cluster's document rule
    (forensics.spike.rule_members)."""
    only = list(culprits) if culprits else None
    seen = culprit_docs(ranked, window_docs, only=only)
    seen = rule_members(ranked, seen, window_docs, run.notes)
    blamed = sorted(seen["cluster"].unique().to_list()) if seen.height else []
    culprit = (
        pl.concat([seen, source_documents(run.replayer, ranked, blamed, run.notes)])
        .unique(["dataset", "doc_id"], keep="first", maintain_order=True)
        .sort("dataset", "doc_id")
    )
    return Blame(seen, culprit, blamed)


def warning_marks(
    step: int, window: tuple[int, int], events: list[dict[str, Any]], starts: list[int]
) -> list[Mark]:
    """Earlier signs of trouble in the window the rollback must go before: a grad-norm alarm
    in the window that triage tied to this spike (the loss event it announced starts no later
    than NEAR iterations past `step`), and a data stage that began inside the window."""
    marks = [
        Mark(int(e["step"]), "the grad-norm alarm")
        for e in events
        if e.get("kind") == "grad_norm_alarm"
        and window[0] <= int(e["step"]) <= step
        and e.get("loss_onset_step") is not None
        and int(e["loss_onset_step"]) <= step + NEAR
    ]
    marks += [Mark(s, "the data stage switch") for s in starts if window[0] < s <= step]
    return marks


def rollback_stage(
    run: SpikeRun,
    ranked: pl.DataFrame,
    blame: Blame,
    rows: pl.DataFrame,
    events: list[dict[str, Any]] | None,
    trainer: Trainer,
) -> Rollback:
    """The checkpoint to restart from (forensics.rollback's rule): before the culprit's first
    document when the blamed data is new in the window (data that was always there has no onset
    to roll back before), and before any earlier warning (`events`: triage's, from the log).
    `rows`: the window's replay rows (forensics.spike.stages.window_rows); `trainer` names the
    checkpoints of the run's save folder."""
    onset = onset_iteration(rows, blame.culprit) if blame.culprit.height else None
    new = bool(ranked.filter(pl.col("id").is_in(blame.clusters))["new_in_window"].any())
    step = run.step
    marks = warning_marks(step, run.plan.window, events or [], stage_starts(run.config))
    return recommend_rollback(
        step,
        run.config.available_checkpoints(trainer),
        onset=Mark(onset, "the culprit's first document") if new and onset is not None else None,
        warnings=marks,
        trainer=trainer,
    )
