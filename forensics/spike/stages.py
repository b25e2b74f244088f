"""The spike pipeline's data stages: tables in, one table out, each cached, timed and shown.

    stage      in                      out                                  cache file
    replay     the run                 replay table (+ side)                replay-<key>.parquet
                                       each side's documents, once          sides-<key>.parquet,
                                                                            distinct-<key>.parquet
    decode     replay                  documents (text, facets)             docs-<key>.parquet
    score      documents               + garbage/spam scores and reasons    scores-<key>-<v>.parquet
    repeats    token ids               + repeated n-grams (garbage rule)    ngrams-<key>-<v>.parquet
    tokens     token ids, both sides   + token statistics (garbage rule)    tokstats-<key>-<s>
    cluster,   window, baseline docs   ranked clusters with verdicts,       clusters-<c>.parquet,
    embed, fit                         embedding assignments, notes         assign-<c>.parquet,
                                                                            clusters-<c>.json,
                                                                            embeddings/ (per text)
    model      replay, clusters        clusters with the model's evidence   rescore-<k>.npz

The key (SpikeRun.key) hashes the config, the data fingerprint, the window and the baseline;
<v> is a hash of the scorer's source, so a changed scorer rescores (<s>: of the spike package's,
for the token rule); <c> adds the code's version
and the embedding options (forensics.spike.cluster_cache). A rerun with the scores cached does
not read the decoded documents: the scored table holds the text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from dataloaders.mapped_pages import releasing_pages
from forensics.cluster import cluster_embeddings, cluster_sources, describe_sample
from forensics.cluster.baseline_fit import describe_fit, fitted_verdicts
from forensics.cluster.embedding import default_cap
from forensics.cluster.expected import blend_note, no_blend_note, window_blend
from forensics.cluster.presence import PresenceMemo
from forensics.cluster.sample import SampleDesign
from forensics.cluster.texts import ScoredTexts
from forensics.errors import ForensicsError
from forensics.pipeline import cached_file, cached_scan, cached_table, module_version
from forensics.rescore import rescore_stage
from forensics.score import score_table
from forensics.spike.census import census_file
from forensics.spike.cluster_cache import cached_clusters, clusters_key
from forensics.spike.drawn import distinct_documents, drawn_documents
from forensics.spike.options import EmbedSettings, Engine
from forensics.spike.parts import merge_parts, plan_parts, run_parts
from forensics.spike.repeats import repeats_stage
from forensics.spike.run_context import SpikeRun
from forensics.spike.tokcheck import check_tokenizer
from forensics.spike.token_signal import token_stage
from forensics.window import stage_starts


def replay_stage(run: SpikeRun, engine: Engine) -> pl.LazyFrame:
    """Which samples (and document segments) each iteration of the window and the baseline
    consumed; `side` says which ("window" / "baseline"). Replayed in parts by iteration range,
    in this process or on `engine` (forensics.spike.census), streamed into the cache file;
    returned as a scan of it: millions of rows at production scale, each stage reads the
    columns and rows it needs (`window_rows`)."""
    window, baseline = run.plan.window, run.plan.baseline

    def replay(path: Path) -> None:
        sides = {"window": window, "baseline": baseline}
        census_file(
            run.replayer,
            run.config,
            sides,
            path,
            engine=engine.name,
            workers=engine.workers,
            address=engine.address,
            progress=engine.progress,
        )

    what = f"window {window[0]}-{window[1]}, baseline {baseline[0]}-{baseline[1]}"
    with run.clock.stage("replay", what):
        table = cached_scan(replay_path(run), replay, run.hits, "replay")
        run.replayer.save_cache()
    return table


def replay_path(run: SpikeRun) -> Path:
    """The replay stage's cache file."""
    return run.cache / f"replay-{run.key}.parquet"


# The replay's own columns (dataloaders.base) the stages after the replay read of the window's
# rows: the density of each group (its segments' tokens per sample and iteration), the blend
# (per stage), the rollback's onset and the report (iterations, samples). `position` stands for
# the sample where a family gives no `sample_index`.
WINDOW_ROW_COLUMNS = (
    "iteration", "sample_index", "stage", "dataset", "doc_id", "token_start", "token_end",
)  # fmt: skip


def window_rows(replay: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """The window's replay rows with the replay's own columns the later stages read
    (`WINDOW_ROW_COLUMNS`). The facets are left out (each document's are the census's), and
    the columns no stage reads: at production scale the table has tens of millions of rows."""
    lazy = replay.lazy()
    names = lazy.collect_schema().names()
    wanted = [*WINDOW_ROW_COLUMNS, *([] if "sample_index" in names else ["position"])]
    own = [c for c in names if c in wanted]
    return lazy.filter(pl.col("side") == "window").select(own).collect()


def decode_stage(run: SpikeRun, replay: pl.LazyFrame) -> pl.DataFrame:
    """Each distinct document of the replay decoded once, whole (scoring reads the whole
    document, not the segment a sample held)."""
    distinct = distinct_documents(run, replay)
    with run.clock.stage("decode", f"{distinct.height:,} distinct documents"):
        return cached_table(
            run.cache / f"docs-{run.key}.parquet",
            lambda: releasing_pages(run.replayer.documents)(distinct, progress=run.progress),
            run.hits,
            "decode",
        )


def score_stage(run: SpikeRun, docs: Callable[[], pl.DataFrame]) -> pl.DataFrame:
    """Garbage and spam scores with their reasons, once per document. `docs` gives the decoded
    documents; it is not called when the scores are cached (the scored table holds the text:
    a rerun reads one table, not two, and the decode stage counts as read from the cache)."""
    cache, key = run.cache, run.key
    score_file = cache / f"scores-{key}-{module_version('forensics.score')}.parquet"
    decoded = None if score_file.is_file() else docs()  # decoded outside the score clock
    if decoded is None:
        with run.clock.stage("decode", "not needed: the scored documents hold the text"):
            run.hits.setdefault("decode", True)
    what = "read from the stage cache" if decoded is None else f"{decoded.height:,} documents"
    with run.clock.stage("score", what):
        scored = cached_table(
            score_file,
            # Rule keys too: the cluster tables group reasons by them. (`docs()` again: a
            # damaged cache file is rescored.)
            lambda: score_table(
                docs() if decoded is None else decoded,
                "text",
                progress=run.progress,
                keys=True,
            ),  # fmt: skip
            run.hits,
            "score",
        )
        for stale in cache.glob(f"scores-{key}-*.parquet"):  # an older scorer's, never read again
            if stale != score_file:
                stale.unlink(missing_ok=True)
    return scored


def document_stages(run: SpikeRun, replay: pl.LazyFrame, engine: Engine) -> pl.DataFrame:
    """The window's and baseline's documents, decoded and scored: in this process (decode,
    then score), or in parts on a process pool or a Ray cluster (`engine`), which gives the
    same table; then checked for repeated n-grams on their token ids, and their token
    statistics against the baseline's (forensics.spike.token_signal)."""
    distinct = distinct_documents(run, replay)
    check_tokenizer(run.replayer, distinct, run.config.tokenizer)
    if engine.in_process or distinct.height == 0:
        scored = score_stage(run, lambda: decode_stage(run, replay))
    else:
        scored = parts_stage(run, distinct, engine)
    scored = repeats_stage(run, distinct, scored)
    return token_stage(run, replay, distinct, scored)


def parts_stage(run: SpikeRun, distinct: pl.DataFrame, engine: Engine) -> pl.DataFrame:
    """Decode and score in parts on `engine` (forensics.spike.parts). Writes the same cache
    files as the in-process stages, so a rerun on either engine reads them back."""
    import shutil

    cache, key = run.cache, run.key
    version = module_version("forensics.score")
    folder = cache / f"parts-{key}-{version}"

    def decode_and_score(score_file: Path) -> None:
        items = plan_parts(distinct, folder)
        run_parts(run.config, items, engine.name, engine.workers, engine.address, engine.progress)
        merge_parts(items, cache / f"docs-{key}.parquet", score_file)

    what = f"{distinct.height:,} distinct documents on {engine}"
    with run.clock.stage("score", what):
        score_file = cache / f"scores-{key}-{version}.parquet"
        scored = cached_file(score_file, decode_and_score, run.hits, "score")
        shutil.rmtree(folder, ignore_errors=True)  # merged into the cache file
    return scored


def split_sides(
    run: SpikeRun, replay: pl.LazyFrame, scored: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The scored documents the window drew, and those the baseline drew (a document drawn by
    both is in both)."""
    sides = drawn_documents(run, replay)

    def side(name: str) -> pl.DataFrame:
        drawn = sides.filter(pl.col("side") == name).drop("side")
        return scored.join(drawn, on=["dataset", "doc_id"]).sort("dataset", "doc_id")

    return side("window"), side("baseline")


@dataclass
class Clusters:
    """The ranked clusters (source facets and embeddings) with verdicts, and the embedding
    assignment of each sampled document (None when embedding is off)."""

    ranked: pl.DataFrame
    assignments: pl.DataFrame | None = None
    embedding_note: str | None = None
    model_view: Any = None  # forensics.rescore's verdict, when a checkpoint was rescored


def cluster_stage(
    run: SpikeRun,
    window_docs: pl.DataFrame,
    baseline_docs: pl.DataFrame,
    embedding: EmbedSettings,
    culprits: tuple[str, ...] | None = None,
    rows: pl.DataFrame | None = None,
    design: SampleDesign | None = None,
    scored_key: str | None = None,
    texts: ScoredTexts | None = None,
) -> Clusters:
    """Groups of window documents (by source facet, and by embedding k-means) compared with the
    baseline, ranked, with a verdict each that fits the baseline at hand (`rows`, the window's
    replay rows (`window_rows`), give each group's density over the window:
    forensics.cluster.baseline_fit). Kept
    by its inputs (forensics.spike.cluster_cache): a rerun with cheap options reads it back.

    `embedding`: how the embedding clusters are made; `culprits`: the cluster ids named by hand
    (`--culprit`), refused unless the window has them. `design`: the documents were sampled
    (forensics.spike.passes); `scored_key` names the set scored, which the cache key then
    holds; `texts` reads the texts the sides leave out (forensics.cluster.texts)."""

    def compute() -> tuple[pl.DataFrame, pl.DataFrame | None, dict | None]:
        return compute_clusters(run, window_docs, baseline_docs, rows, embedding, design, texts)

    key = clusters_key(run.key, embedding, scored_key)
    ranked, assignments, note = cached_clusters(
        run.cache, key, run.notes, run.hits, run.clock, compute
    )
    if culprits:
        unknown = sorted(set(culprits) - set(ranked["id"].to_list()))
        if unknown:
            raise ForensicsError(f"--culprit {', '.join(unknown)}: no such cluster in this window")
    return Clusters(ranked, assignments, note)


def compute_clusters(
    run: SpikeRun,
    window_docs: pl.DataFrame,
    baseline_docs: pl.DataFrame,
    rows: pl.DataFrame | None,
    embedding: EmbedSettings,
    design: SampleDesign | None = None,
    texts: ScoredTexts | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame | None, dict | None]:
    """The source-facet and embedding clusters (made as `embedding` says), fitted to the
    baseline: (ranked, assignments, the embedding sample's note). With `design` (sampled
    documents) the embedding sample is drawn from the scored documents, its rows given back as
    the whole tables' rows."""
    with run.clock.stage("cluster", "by source facet", spinner=True):
        parts = [cluster_sources(window_docs, baseline_docs, design=design)]
    model, device = embedding.model, embedding.device
    cap = default_cap(model, device) if embedding.cap is None else embedding.cap
    assignments, note = None, None
    embed_window, embed_baseline = window_docs, baseline_docs
    if design is not None:
        embed_window, embed_baseline = scored_rows(window_docs), scored_rows(baseline_docs)
    if cap > 0:
        with run.clock.stage("embed", f"up to {cap:,} documents, then k-means"):
            embedded, assignments = cluster_embeddings(
                embed_window,
                embed_baseline,
                cap=cap,
                model=model,
                device=device,
                cache_dir=run.cache / "embeddings",
                progress=run.progress,
                texts=texts,
            )
            note = describe_sample(assignments, cap)
            if design is not None:
                embedded, assignments = whole_rows(embedded, assignments, embed_window,
                                                   embed_baseline)  # fmt: skip
        parts.append(embedded)
    with run.clock.stage("fit", "verdicts against the baseline", spinner=True):
        ranked = fit_stage(run, pl.concat(parts, how="diagonal_relaxed"), window_docs,
                           baseline_docs, rows)  # fmt: skip
    return ranked, assignments, note


def fit_stage(
    run: SpikeRun,
    clusters: pl.DataFrame,
    window_docs: pl.DataFrame,
    baseline_docs: pl.DataFrame,
    rows: pl.DataFrame | None,
) -> pl.DataFrame:
    """Verdicts that fit the baseline (a mixture switch between it and the window, a baseline
    too small to judge), with the notes saying which case applies."""
    return fit_verdicts(clusters, window_docs, baseline_docs, rows, run.plan, run.config,
                        run.replayer, run.notes)  # fmt: skip


def fit_verdicts(
    clusters: pl.DataFrame,
    window_docs: pl.DataFrame,
    baseline_docs: pl.DataFrame,
    rows: pl.DataFrame | None,
    plan: Any,
    config: Any,
    replayer: Any,
    notes: list[str],
    presence_memo: PresenceMemo | None = None,
) -> pl.DataFrame:
    """`fit_stage` from the arguments it reads (`rows`: `window_rows`; `plan`: the run's
    SpikeWindows); its notes go to `notes`; `presence_memo`:
    forensics.cluster.presence.PresenceMemo."""
    window, baseline = plan.window, plan.baseline
    starts = stage_starts(config)
    fit = describe_fit(window, baseline, starts, baseline_docs.height, window_docs.height)
    notes.extend(fit.notes)
    if rows is None:
        rows = pl.DataFrame(schema={"iteration": pl.Int64, "dataset": pl.Utf8, "doc_id": pl.Int64})
    blend = window_blend(replayer, rows, starts)
    if fit.switch_between or fit.too_small:  # the blend then stands in for the baseline
        note = blend_note(blend) if blend is not None else no_blend_note(replayer)
        notes.extend([note] if note else [])
    return fitted_verdicts(clusters, fit, window_docs, rows, window, blend, presence_memo)


def scored_rows(docs: pl.DataFrame) -> pl.DataFrame:
    """The scored documents of a sampled side, with `_whole` (their row in the whole table)."""
    return docs.with_row_index("_whole").filter(pl.col("_scored"))


def whole_rows(
    embedded: pl.DataFrame, assignments: pl.DataFrame, window: pl.DataFrame, baseline: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Embedding clusters and assignments computed on `scored_rows`, with their row numbers
    (`members`, `flagged_members`, `row`) turned into the whole tables' rows."""
    w_rows = window["_whole"].cast(pl.Int64).to_numpy()
    b_rows = baseline["_whole"].cast(pl.Int64).to_numpy()

    def lists(column: str) -> pl.Series:
        return pl.Series(column, [w_rows[m].tolist() if m is not None else None
                                  for m in embedded[column].to_list()],
                         dtype=pl.List(pl.Int64))  # fmt: skip

    embedded = embedded.with_columns(lists("members"), lists("flagged_members"))
    rows = assignments["row"].to_numpy().astype(np.int64)
    window_side = (assignments["side"] == "window").to_numpy()
    whole = rows.copy()
    whole[window_side] = w_rows[rows[window_side]]
    whole[~window_side] = b_rows[rows[~window_side]]
    return embedded, assignments.with_columns(
        pl.Series("row", whole, dtype=assignments["row"].dtype)
    )


def model_stage(
    run: SpikeRun,
    replay: pl.LazyFrame,
    clusters: Clusters,
    window_docs: pl.DataFrame,
    baseline_docs: pl.DataFrame | None = None,
    rescore: Any = None,
) -> Clusters:
    """The model's view (`rescore`, forensics.rescore.RescoreOptions from `--checkpoint` /
    `--losses`): the window's samples rescored with the pre-spike checkpoint; its evidence may
    demote a data-side culprit, and name a group whose loss stands out that no scorer flags
    (`baseline_docs`: each group's own baseline). A no-op without it."""
    if rescore is None:
        return clusters

    with run.clock.stage("rescore", "the window's samples with the checkpoint"):
        ranked, view = rescore_stage(
            run.replayer,
            replay.collect(),
            clusters.ranked,
            window_docs,
            rescore,
            run.cache,
            run.out,
            run.fingerprint,
            run.hits,
            baseline_docs,
        )
    return Clusters(ranked, clusters.assignments, clusters.embedding_note, view)
