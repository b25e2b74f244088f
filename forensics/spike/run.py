"""`forensics spike`, as the runbook reads: replay the window, decode and score its documents,
cluster them against the baseline, blame, roll back, measure the culprit's exposure, plan the
skip, report."""

from __future__ import annotations

from pathlib import Path

from dataloaders.run_config import RunConfig
from dataloaders.trainers import Trainer
from forensics.spike.blame import blame_stage, rollback_stage
from forensics.spike.exposure import exposure_stage
from forensics.spike.options import SpikeOptions, SpikeResult
from forensics.spike.reporting import log_evidence, report_stage
from forensics.spike.run_context import open_run
from forensics.spike.skipping import plan_skip
from forensics.spike.stages import (
    cluster_stage,
    document_stages,
    model_stage,
    replay_stage,
    split_sides,
)


def run_spike(
    config: Path | str | RunConfig,
    out: Path,
    options: SpikeOptions,
    trainer: Trainer | None = None,
) -> SpikeResult:
    """The whole command. Raises ForensicsError for bad input before writing anything.

    `config`: a YAML config path, or a RunConfig built elsewhere (the training job's Megatron
    arguments, `forensics.megatron_args.resolve_run_config`). `trainer`: the loop that reads
    the skip flags and names the checkpoints (--trainer; None: the config's training.trainer)."""
    options.check()
    from dataloaders.storage import fetched

    fetched.reset()  # report.json's object_storage: what this spike fetched
    with open_run(config, out, options, trainer) as run:
        trainer = run.trainer
        replay = replay_stage(run)
        scored = document_stages(run, replay)
        window_docs, baseline_docs = split_sides(run, replay, scored)
        clusters = cluster_stage(run, window_docs, baseline_docs, replay)
        clusters = model_stage(run, replay, clusters, window_docs, baseline_docs)
        blame = blame_stage(run, clusters.ranked, window_docs)
        evidence = log_evidence(run.config, run.plan.window, run.notes)
        rollback = rollback_stage(run, clusters.ranked, blame, replay, evidence[1], trainer)
        exposure, ahead, scope = exposure_stage(run, blame.culprit, rollback.resume_iteration)
        skip = plan_skip(run, trainer, rollback, blame, exposure, ahead, scope, window_docs)
        report, sections = report_stage(
            run, replay, clusters, window_docs, baseline_docs, rollback, skip, exposure, ahead,
            evidence,
        )  # fmt: skip
    if options.progress:
        from forensics.report import print_summary

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
