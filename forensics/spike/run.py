"""`forensics spike`, as the runbook reads: replay the window, count its documents (census),
decode and score a sample of each group and then every document of the groups it names,
cluster them against the baseline, blame, roll back, measure the culprit's exposure, plan the
skip, report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from dataloaders.run_config import RunConfig
from dataloaders.storage import fetched
from dataloaders.trainers import Trainer
from forensics.cluster.texts import ScoredTexts
from forensics.report import print_summary
from forensics.spike.blame import blame_stage, rollback_stage
from forensics.spike.exposure import exposure_stage
from forensics.spike.options import Engine, SpikeOptions, SpikeResult
from forensics.spike.passes import evidence_passes, figures_note, rule_datasets_whole
from forensics.spike.reporting import log_evidence, report_stage
from forensics.spike.run_context import SpikeRun, open_run
from forensics.spike.skipping import plan_skip
from forensics.spike.stages import (
    Clusters,
    cluster_stage,
    document_stages,
    model_stage,
    replay_stage,
    split_sides,
    window_rows,
)


def document_passes(
    run: SpikeRun, replay: pl.LazyFrame, rows: pl.DataFrame, options: SpikeOptions, engine: Engine
) -> tuple[Any, Any, Clusters, pl.DataFrame | None, ScoredTexts | None]:
    """The window's and baseline's documents, their clusters, and what a sampled side leaves
    out: the scored documents' figures (forensics.spike.passes.scored_figures) and texts
    (forensics.cluster.texts; both None when every document was scored: the sides hold
    them): by the three passes (census, evidence from a
    sample, every document of what is named: forensics.spike.passes), or, with --exhaustive or
    when the sample would be every document, by scoring every document. Each stage is given
    the options it reads; the parts run on `engine`."""
    evidence, culprits, embedding = None, options.culprits, options.embed_settings()
    if not options.exhaustive:
        evidence = evidence_passes(run, replay, rows, options.sample_docs, culprits, engine)
    if evidence is None:
        scored = document_stages(run, replay, engine)
        window_docs, baseline_docs = split_sides(run, replay, scored)
        clusters = cluster_stage(run, window_docs, baseline_docs, embedding, culprits, rows)
        return window_docs, baseline_docs, clusters, None, None
    clusters = cluster_stage(run, evidence.window_docs, evidence.baseline_docs, embedding,
                             culprits, rows, evidence.design, evidence.scored_key,
                             evidence.texts)  # fmt: skip
    evidence = rule_datasets_whole(run, replay, evidence, clusters.ranked, culprits, engine)
    run.notes.append(figures_note(evidence))
    return (evidence.window_docs, evidence.baseline_docs, clusters, evidence.figures,
            evidence.texts)  # fmt: skip


def run_spike(
    config: Path | str | RunConfig,
    out: Path,
    options: SpikeOptions,
    trainer: Trainer | None = None,
) -> SpikeResult:
    """The whole command. Raises ForensicsError for bad input before writing anything.

    `config`: a YAML config path, or a RunConfig built elsewhere (the training job's Megatron
    arguments, `forensics.run_source.resolve_run_config`). `trainer`: the loop that reads
    the skip flags and names the checkpoints (--trainer; None: the config's training.trainer)."""
    options.check()

    fetched.reset()  # report.json's object_storage: what this spike fetched
    with open_run(config, out, options, trainer) as run:
        trainer, engine, settings = run.trainer, options.engine_settings(), options.skip_settings()
        replay = replay_stage(run, engine)  # a scan: the stages read what they need of it
        rows = window_rows(replay)
        window_docs, baseline_docs, clusters, figures, texts = document_passes(
            run, replay, rows, options, engine
        )
        clusters = model_stage(run, replay, clusters, window_docs, baseline_docs, options.rescore)
        blame = blame_stage(run, clusters.ranked, window_docs, options.culprits)
        evidence = log_evidence(run.config, run.plan.window, run.notes)
        rollback = rollback_stage(run, clusters.ranked, blame, rows, evidence[1], trainer)
        exposure, ahead, scope = exposure_stage(
            run, blame.culprit, rollback.resume_iteration, settings.after
        )
        skip = plan_skip(run, trainer, rollback, blame, exposure, ahead, scope, window_docs,
                         settings)  # fmt: skip
        report, sections = report_stage(
            run, rows, clusters, window_docs, baseline_docs, rollback, skip, exposure, ahead,
            evidence, culprits=options.culprits, sample_docs=options.sample_docs,
            rerun=options.rerun_args(), figures=figures, texts=texts,
        )  # fmt: skip
    if options.progress:
        print_summary(report, sections=sections, html=run.out / "report.html")
    return SpikeResult(
        out=run.out,
        skip=skip,
        report=report,
        rollback=rollback,
        window=run.plan.window,
        baseline=run.plan.baseline,
        timings=run.clock.timings,
        cached=run.hits,
        notes=run.notes,
    )
