"""The skip plan: which iterations to skip on the restart, every trainer's flag for them, the
block list, and what it costs (forensics.skip does the exact work; this assembles it)."""

from __future__ import annotations

import polars as pl

from dataloaders.schedule import Schedule
from dataloaders.trainers import DEFAULT_TRAINER, get_trainer
from forensics.errors import ForensicsError
from forensics.provenance import provenance
from forensics.rollback import Rollback
from forensics.skip import collateral, sample_ranges, select_iterations
from forensics.skip.action import action_for_plan
from forensics.skip.plan import SkipPlan, plan_flags
from forensics.skip.readme import SKIP_README
from forensics.skip.tracker import TRACKER_FILE
from forensics.spike.blame import Blame, documents_by_dataset, flagged_documents
from forensics.spike.exposure import ahead_advice, ahead_summary
from forensics.spike.run_context import SpikeRun


def chosen_iterations(run: SpikeRun, exposure: pl.DataFrame, ahead: pl.DataFrame) -> list[int]:
    """Iterations of the scope over --threshold, plus (--skip-ahead) the dense ones ahead."""
    opts = run.options
    chosen = select_iterations(exposure, opts.threshold)
    if opts.skip_ahead and ahead.height:
        dense = ahead.filter(
            (pl.col("flagged_samples") > 0)
            & (pl.col("flagged_samples") >= opts.ahead_share * pl.col("samples"))
        )
        chosen = sorted(set(chosen) | set(dense["iteration"].to_list()))
    return chosen


def plan_skip(
    run: SpikeRun,
    rollback: Rollback,
    blame: Blame,
    exposure: pl.DataFrame,
    ahead: pl.DataFrame,
    scope: tuple[int, int],
    window_docs: pl.DataFrame,
) -> SkipPlan:
    """The whole skip plan. Refuses (ForensicsError) when the run's trainer has no exact flag
    for the ranges: a wrong flag would cost a restart."""
    opts, replayer = run.options, run.replayer
    trainer = opts.trainer or run.config.training.trainer
    schedule = getattr(replayer, "schedule", None) or Schedule(run.config.training)
    chosen = chosen_iterations(run, exposure, ahead)
    ranges, composed, joined, flags = plan_flags(trainer, chosen, schedule, rollback.iteration)
    if composed:
        run.notes.append(
            f"{len(composed)} iterations after the rollback were skipped by an earlier restart "
            "(training.applied_skips) and are skipped again"
        )
    if ranges and flags[trainer].flag is None:
        raise ForensicsError(
            f"no exact {trainer} skip flag for iterations {ranges[0][0]}-{ranges[-1][1]}: "
            f"{flags[trainer].refusal}. Roll back to a checkpoint where it is exact, or rerun "
            f"with --trainer {DEFAULT_TRAINER} to get the block list and remove its documents"
        )
    costed = pl.concat([exposure, ahead]) if opts.skip_ahead else exposure
    last_skipped = max([scope[1], *(b for _, b in ranges)])
    ahead_info = ahead_summary(ahead, opts.ahead_share)
    tracked = get_trainer(trainer).reads_tracker and flags[trainer].values
    plan = SkipPlan(
        step=opts.step,
        window=list(run.plan.window),
        rollback=rollback.to_dict(),
        scope=list(scope),
        threshold=opts.threshold,
        trainer=trainer,
        iterations=[list(r) for r in ranges],
        samples=sample_ranges(replayer.iteration_samples(scope[0], last_skipped), ranges),
        documents=documents_by_dataset(blame.culprit),
        culprit_clusters=blame.clusters,
        documents_seen_in_window=blame.seen.height,
        # The narrow alternative: only the culprit documents the window drew that a scorer
        # flagged. When the blamed source is a whole dataset (no finer provenance), this is the
        # list to block if removing the dataset is too much.
        documents_flagged=documents_by_dataset(flagged_documents(blame.seen, window_docs)),
        flags=flags,
        collateral=collateral(costed, ranges) | {"iterations_joined_for_trainer": joined},
        ahead=ahead_info | {"skip_ahead": opts.skip_ahead, "advice": ahead_advice(ahead_info)},
        fingerprint=run.fingerprint,
        notes=run.notes,
        composed=composed,
        tracker_file=TRACKER_FILE if tracked else None,
    )
    # the action the plan leads with (rebuild or skip) and a readme for every key
    plan.action, plan.readme = action_for_plan(plan, run.config, run.out, run.replayer), SKIP_README
    plan.provenance = provenance(run.config.name)
    return plan
