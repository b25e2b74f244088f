"""The spike report's data: what every renderer shows, and how its clusters and numbers are named.

Why one model and four renderers: report.json, report.md, report.html and the terminal must
tell the same story with the same numbers. Everything is computed here (`build_report`) and in
`sections` (`report_sections`: the first screen and every other section, from this model);
the renderers only lay it out and escape it. Text from documents or manifests is kept raw here
(with control characters already neutralised in excerpts) and escaped by each renderer for its
medium.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from forensics.cluster.baseline_fit import dirty_in_window
from forensics.cluster.controls import flagged_rates, unexplained_groups
from forensics.cluster.keywords import with_keywords
from forensics.cluster.texts import ScoredTexts, with_texts
from forensics.cluster.verdict import culprit_docs, headline_culprit, rule_text
from forensics.report.confidence import loss_explained
from forensics.report.incident import Incident
from forensics.report.numbers import pct
from forensics.report.skip_view import ReportSkip
from forensics.safe_text import excerpt

EXAMPLES_PER_CLUSTER = 3
EXAMPLE_CLUSTERS = 12  # culprits and suspects (then the top clusters) that get examples
EXCERPT_CHARS = 300
TABLE_ROWS = 30  # cluster rows in report.md's and report.html's tables


@dataclass
class SpikeReport:
    """Everything a report shows. Tables are polars frames; see each field for its columns."""

    step: int  # the spike's iteration
    window: tuple[int, int]  # first, last iteration replayed before the spike
    baseline: tuple[int, int]  # first, last iteration of the baseline window
    rollback_iteration: int | None
    clusters: pl.DataFrame  # assign_verdicts output, sorted by suspicion
    rollback_note: str = ""
    # cluster (id), dataset, doc_id, excerpt (control characters neutralised), reasons (list)
    examples: pl.DataFrame | None = None
    culprit_share: pl.DataFrame | None = None  # iteration, share (of samples holding culprit docs)
    loss: pl.DataFrame | None = None  # step, loss (forensics.triage.readers.read_log)
    # x, y, cluster, side, flagged, culprit (id of the culprit cluster, source or embedding, the
    # document belongs to; null if none), dataset, doc_id: one row per embedded document
    embedding_xy: pl.DataFrame | None = None
    scores: pl.DataFrame | None = None  # side ("window"/"baseline"), garbage_score, spam_score
    embedding_note: dict[str, Any] | None = None  # cluster.describe_sample(...)
    # the skip plan as the report shows it (forensics.report.skip_view), filled by the pipeline
    skip: ReportSkip | None = None
    culprit_first_iteration: int | None = None  # first window iteration holding its documents
    # what the pipeline noticed on the way (stage crossings, how the baseline was chosen, a log
    # it could not read): shown under the summary, since it changes how the verdict reads
    notes: list[str] = field(default_factory=list)
    rules: dict[str, str] = field(default_factory=rule_text)
    # the model's view (forensics.rescore.verdict.model_view), None when no checkpoint was given
    model: dict[str, Any] | None = None
    # every window document with its scores, clusters, iterations (report.documents); the
    # drill-down's source and documents.parquet, None when the pipeline did not build it
    documents: pl.DataFrame | pl.LazyFrame | None = None
    # the file documents.parquet is copied from, when the pipeline keeps `documents` in its
    # stage cache (None: written from the frame)
    documents_file: Path | None = None
    # who wrote it: run name, tool version, timestamp, command line (forensics.provenance)
    provenance: dict[str, Any] | None = None
    # the incident timeline's marks besides the loss (triage's alarms, stage switches,
    # checkpoints, the culprit's share past the spike); None when the pipeline did not build it
    incident: Incident | None = None
    # computed by build_report from the tables above, before any rendering: how the window's
    # loss excess lines up with the culprit (forensics.report.confidence.loss_explained), and
    # the dirty groups of the window outside any culprit (cluster.baseline_fit.dirty_in_window)
    loss_fit: dict[str, Any] | None = None
    run_config: str | None = None  # the run's config as the user named it (drill-down commands)
    token_export: bool = True  # `forensics replay --tokens` can write this run's exact tokens
    dirty_groups: pl.DataFrame | None = None
    # the clean control (forensics.cluster.controls): source groups over-represented or new that
    # no scorer flags (the model could tell), each side's flagged share, the spike command with
    # --checkpoint that would ask the model, and triage's causes to check when the data is clean
    unexplained: pl.DataFrame | None = None
    control: dict[str, float] | None = None
    checkpoint_command: str | None = None
    next_causes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def culprit(self) -> dict[str, Any] | None:
        return headline_culprit(self.clusters)

    @property
    def stage_starts(self) -> list[int]:
        """The data stages' first iterations, when the pipeline said (the incident)."""
        return list(self.incident.stage_starts) if self.incident is not None else []

    @property
    def switch_before_spike(self) -> bool:
        """A data stage starts after the baseline and by the window's end: a group new in the
        window may have come with the new blend."""
        return any(self.baseline[1] < s <= self.window[1] for s in self.stage_starts)


def cluster_name(row: dict[str, Any]) -> str:
    """ "crawl_batch=crawl-2026-10-17" for a source cluster, "embedding e3" for an embedding one."""
    if row.get("kind") == "source":
        return f"{row['facet']}={row['key']}"
    words = row.get("keywords")  # forensics.cluster.keywords: what its documents are about
    return f"embedding {row['id']}" + (f" ({', '.join(words)})" if words else "")


def cluster_notes(row: dict[str, Any]) -> list[str]:
    """The table's note cell, as parts: new, nesting, aliases, dominant sources, top reasons."""
    notes = []
    if row.get("new_in_window"):
        notes.append("new in window")
    if row.get("explained_by"):
        notes.append(f"inside {row['explained_by']}")
    if row.get("aliases"):
        notes.append("same docs as " + ", ".join(row["aliases"][:3]))
    if row.get("dominant_sources"):
        notes.append(", ".join(row["dominant_sources"]))
    if row.get("top_reasons"):
        notes.append("reasons: " + "; ".join(row["top_reasons"]))
    return notes


def cluster_rows(
    report: SpikeReport, limit: int = TABLE_ROWS, explained: bool = True
) -> list[dict]:
    """The rows the tables show, `limit` at most: culprits, suspects that stand on their own,
    suspects inside a culprit, then clean clusters (those inside a culprit last); without
    `explained`, no cluster inside a culprit."""
    ranked = report.clusters.with_columns(
        pl.col("verdict").replace_strict({"culprit": 0, "suspect": 1, "clean": 2}).alias("_v"),
        pl.col("explained_by").is_not_null().alias("_x"),
    )
    if not explained:
        ranked = ranked.filter(~pl.col("_x"))
    ranked = ranked.sort(
        ["_v", "_x", "suspicion", "docs", "id"], descending=[False, False, True, True, False]
    )
    return list(ranked.drop("_v", "_x").head(limit).iter_rows(named=True))


def pick_examples(
    ranked: pl.DataFrame,
    window_docs: pl.DataFrame,
    per_cluster: int = EXAMPLES_PER_CLUSTER,
    texts: ScoredTexts | None = None,
) -> pl.DataFrame:
    """A few documents per interesting cluster: flagged ones first, highest score first.

    Interesting = culprits, then suspects that are not inside a culprit, EXAMPLE_CLUSTERS at
    most (a suspect inside a culprit would only repeat the culprit's examples).
    """
    chosen = pl.concat(
        [
            ranked.filter(pl.col("verdict") == "culprit"),
            ranked.filter((pl.col("verdict") == "suspect") & pl.col("explained_by").is_null()),
        ]
    ).head(EXAMPLE_CLUSTERS)
    docs = window_docs.with_row_index("_row").with_columns(
        pl.max_horizontal(
            pl.col("garbage_score").cast(pl.Float64).fill_null(0.0),
            pl.col("spam_score").cast(pl.Float64).fill_null(0.0),
        ).alias("_score")
    )
    for col in ("garbage_reason", "spam_reason"):
        if col not in docs.columns:
            docs = docs.with_columns(pl.lit("").alias(col))
    rows = []
    for cluster_id, members in chosen.select("id", "members").iter_rows():
        if not members:
            continue
        picked = (
            docs.filter(pl.col("_row").is_in(members))
            .sort(["_score", "doc_id"], descending=[True, False])
            .head(per_cluster)
        )
        picked = with_texts(picked, texts)
        if "text" not in picked.columns:
            picked = picked.with_columns(pl.lit("").alias("text"))
        for r in picked.iter_rows(named=True):
            reasons = [x for x in (r["garbage_reason"], r["spam_reason"]) if x]
            rows.append(
                {
                    "cluster": cluster_id,
                    "dataset": r["dataset"],
                    "doc_id": r["doc_id"],
                    "excerpt": excerpt(r["text"], EXCERPT_CHARS),
                    "reasons": reasons,
                    "garbage_score": float(r["garbage_score"] or 0.0),
                    "spam_score": float(r["spam_score"] or 0.0),
                }
            )
    schema = {
        "cluster": pl.Utf8,
        "dataset": pl.Utf8,
        "doc_id": pl.Int64,
        "excerpt": pl.Utf8,
        "reasons": pl.List(pl.Utf8),
        "garbage_score": pl.Float64,
        "spam_score": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema)


def culprit_share_per_iteration(replay: pl.DataFrame, blocked: pl.DataFrame) -> pl.DataFrame:
    """Per iteration, the share of its samples that touch at least one culprit document.

    `replay`: one row per (iteration, sample_index, document segment) with dataset, doc_id.
    `blocked`: (dataset, doc_id) of culprit documents. Shares here are over samples (what a
    skipped iteration costs), unlike cluster shares, which are over documents.
    """
    samples = replay.lazy().group_by("iteration").agg(pl.col("sample_index").n_unique())
    # the culprit documents' rows first (a semi join: few), then their samples
    touched = (
        replay.lazy()
        .select("iteration", "sample_index", "dataset", "doc_id")
        .join(blocked.lazy().select("dataset", "doc_id").unique(), on=["dataset", "doc_id"],
              how="semi")
        .group_by("iteration")
        .agg(pl.col("sample_index").n_unique().alias("culprit"))
    )  # fmt: skip
    return (
        samples.join(touched, on="iteration", how="left")
        .select(
            "iteration",
            (pl.col("culprit").fill_null(0) / pl.col("sample_index")).alias("share"),
            pl.col("sample_index").alias("samples"),
        )
        .sort("iteration")
        .collect(engine="streaming")
    )


def embedding_points(assignments: pl.DataFrame, culprit: pl.DataFrame) -> pl.DataFrame:
    """The 2-D plot's points, each marked with the culprit cluster its document belongs to.

    Why not the embedding cluster's own verdict: embedding clusters inside a culprit source are
    `explained_by` it and clean, so colouring by them hides the culprit's documents. Membership
    is by document: a window document is the culprit's when it is in any culprit cluster
    (culprit_docs: source members, embedded members of embedding culprits).
    """
    marks = culprit.select("dataset", "doc_id", pl.col("cluster").alias("culprit")).unique(
        ["dataset", "doc_id"], keep="first", maintain_order=True
    )
    points = assignments.select(
        "x", "y", "cluster", "side", "flagged", "dataset", "doc_id"
    ).with_row_index("_i")
    window = points.filter(pl.col("side") == "window").join(
        marks, on=["dataset", "doc_id"], how="left"
    )
    baseline = points.filter(pl.col("side") != "window").with_columns(
        pl.lit(None, dtype=pl.Utf8).alias("culprit")
    )
    return (
        pl.concat([window, baseline], how="diagonal_relaxed")
        .sort("_i")
        .select("x", "y", "cluster", "side", "flagged", "culprit", "dataset", "doc_id")
    )


def corroborating_rows(ranked: pl.DataFrame, top: dict[str, Any]) -> list[dict[str, Any]]:
    """Embedding clusters whose embedded documents are mostly (over half) the culprit's: they
    found the same documents by content alone. Biggest first, each with `in_culprit`."""
    mine = set(top.get("members") or [])
    if not mine or "kind" not in ranked.columns:
        return []
    found = []
    for row in ranked.filter(pl.col("kind") == "embedding").iter_rows(named=True):
        members = set(row.get("members") or [])
        if members and len(members & mine) / len(members) > 0.5:
            found.append(row | {"in_culprit": len(members & mine)})
    return sorted(found, key=lambda r: (-len(r["members"]), r["id"]))


def build_report(
    step: int,
    window: tuple[int, int],
    baseline: tuple[int, int],
    rollback_iteration: int | None,
    ranked: pl.DataFrame,
    window_docs: pl.DataFrame,
    baseline_docs: pl.DataFrame,
    *,
    replay: pl.DataFrame | None = None,
    assignments: pl.DataFrame | None = None,
    embedding_note: dict[str, Any] | None = None,
    loss: pl.DataFrame | None = None,
    skip: ReportSkip | None = None,
    rollback_note: str = "",
    notes: list[str] | None = None,
    model: dict[str, Any] | None = None,
    design: Any = None,
    texts: ScoredTexts | None = None,
) -> SpikeReport:
    """Assemble a SpikeReport from the clustering outputs (the spike pipeline's one call).
    `design`: the documents were sampled (forensics.cluster.sample.SampleDesign): the score
    distributions are then the scored documents', the control's rates estimates. `texts`:
    where the sides hold no texts, the store the shown ones are read from."""
    ranked = with_keywords(ranked, window_docs, texts)  # embedding clusters get keyword labels
    examples = pick_examples(ranked, window_docs, texts=texts)
    culprit_share = None
    first_seen = None
    if replay is not None and replay.height:
        blocked = culprit_docs(ranked, window_docs)
        culprit_share = culprit_share_per_iteration(replay, blocked)
        top = headline_culprit(ranked)
        if top is not None:
            mine = culprit_docs(ranked, window_docs, only=[top["id"]])
            seen = replay.join(mine.select("dataset", "doc_id"), on=["dataset", "doc_id"])
            first_seen = int(seen["iteration"].min()) if seen.height else None
    scores = pl.concat(
        [
            (docs.filter(pl.col("_scored")) if "_scored" in docs.columns else docs).select(
                pl.lit(side).alias("side"),
                pl.col("garbage_score").cast(pl.Float64).fill_null(0.0),
                pl.col("spam_score").cast(pl.Float64).fill_null(0.0),
            )
            for side, docs in (("window", window_docs), ("baseline", baseline_docs))
        ]
    )
    xy = None
    if assignments is not None and assignments.height:
        xy = embedding_points(assignments, culprit_docs(ranked, window_docs))
    return SpikeReport(
        step=int(step),
        window=(int(window[0]), int(window[1])),
        baseline=(int(baseline[0]), int(baseline[1])),
        rollback_iteration=None if rollback_iteration is None else int(rollback_iteration),
        rollback_note=rollback_note,
        clusters=ranked,
        examples=examples,
        culprit_share=culprit_share,
        loss=loss,
        embedding_xy=xy,
        scores=scores,
        embedding_note=embedding_note,
        skip=skip,
        culprit_first_iteration=first_seen,
        notes=list(notes or []),
        model=model,
        rules=rule_text() | ({"model_rule": model["rule"]} if model else {}),
        loss_fit=loss_explained(loss, culprit_share, (int(window[0]), int(window[1]))),
        dirty_groups=dirty_in_window(ranked),
        unexplained=unexplained_groups(ranked),
        control=flagged_rates(window_docs, baseline_docs, design),
    )


# -- numbers, as every medium prints them -----------------------------------------------------


def format_p(p: float) -> str:
    """p-values as an engineer reads them: "p < 1e-30" below 1e-4, else two digits."""
    if p <= 1e-300:
        return "p < 1e-300"
    if p < 1e-4:
        import math

        return f"p < 1e-{int(-math.log10(p))}"
    return f"p = {p:.2g}"


def format_value(value: Any) -> str:
    """A skip-plan value in words: shares as percentages, lists cut at eight."""
    if isinstance(value, float):
        return pct(value) if 0 <= value <= 1 else f"{value:,.2f}"
    if isinstance(value, list | tuple):
        return ", ".join(format_value(v) for v in value[:8]) + (", ..." if len(value) > 8 else "")
    return str(value)
