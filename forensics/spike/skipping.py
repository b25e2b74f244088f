"""The skip plan of a spike: which iterations to skip on the restart, every trainer's flag for
them, the block list, and what it costs (forensics.skip does the exact work and builds the plan,
`build_skip_plan`, as it does for `forensics scan`; this chooses what goes in)."""

from __future__ import annotations

import polars as pl

from dataloaders.trainers import DEFAULT_TRAINER, Trainer
from forensics.errors import ForensicsError
from forensics.provenance import provenance
from forensics.rollback import Rollback
from forensics.skip import select_iterations
from forensics.skip.action import action_for_plan
from forensics.skip.plan import SkipPlan, build_skip_plan, choose_flags
from forensics.skip.readme import SKIP_README
from forensics.skip.tracker import TRACKER_FILE
from forensics.spike.blame import Blame, documents_by_dataset, flagged_documents
from forensics.spike.exposure import ahead_advice, ahead_summary
from forensics.spike.options import SkipSettings
from forensics.spike.run_context import SpikeRun

# skip.json's label when nothing is blamed: its empty ranges and block list are the verdict
NO_CULPRIT_NOTE = (
    "no data culprit: nothing to skip and nothing to remove (the iterations and the block list "
    "are empty on purpose; see report.md for what to check next)"
)


def chosen_iterations(
    exposure: pl.DataFrame, ahead: pl.DataFrame, settings: SkipSettings
) -> list[int]:
    """Iterations of the scope over --threshold, plus (--skip-ahead) the dense ones ahead."""
    chosen = select_iterations(exposure, settings.threshold)
    if settings.skip_ahead and ahead.height:
        dense = ahead.filter(
            (pl.col("flagged_samples") > 0)
            & (pl.col("flagged_samples") >= settings.ahead_share * pl.col("samples"))
        )
        chosen = sorted(set(chosen) | set(dense["iteration"].to_list()))
    return chosen


def plan_skip(
    run: SpikeRun,
    trainer: Trainer,
    rollback: Rollback,
    blame: Blame,
    exposure: pl.DataFrame,
    ahead: pl.DataFrame,
    scope: tuple[int, int],
    window_docs: pl.DataFrame,
    settings: SkipSettings,
) -> SkipPlan:
    """The whole skip plan. Refuses (ForensicsError) when the run's trainer has no exact flag
    for the ranges: a wrong flag would cost a restart. A trainer with no skip option at all
    (`Trainer.no_skip`) gets the plan without its flag (its refusal says why); its action is
    removing the culprit (`forensics.skip.action`). `settings`: which iterations go in."""
    replayer = run.replayer
    choice = choose_flags(
        trainer, chosen_iterations(exposure, ahead, settings), replayer, rollback.iteration
    )
    if choice.composed:
        run.notes.append(
            f"{len(choice.composed)} iterations after the rollback were skipped by an earlier "
            "restart (training.applied_skips) and are skipped again"
        )
    if not choice.exact and not trainer.no_skip:  # no skip option: the action is the rebuild
        ranges, why = choice.ranges, choice.flags[trainer.name].refusal
        raise ForensicsError(
            f"no exact {trainer.name} skip flag for iterations {ranges[0][0]}-{ranges[-1][1]}: "
            f"{why}. Roll back to a checkpoint where it is exact, or rerun "
            f"with --trainer {DEFAULT_TRAINER} to get the block list and remove its documents"
        )
    ahead_info = ahead_summary(ahead, settings.ahead_share)
    tracked = trainer.reads_tracker and choice.flags[trainer.name].values
    plan = build_skip_plan(
        choice,
        replayer,
        pl.concat([exposure, ahead]) if settings.skip_ahead else exposure,
        samples_from=scope[0],
        step=run.step,
        window=list(run.plan.window),
        rollback=rollback.to_dict(),
        scope=list(scope),
        threshold=settings.threshold,
        documents=documents_by_dataset(blame.culprit),
        culprit_clusters=blame.clusters,
        documents_seen_in_window=blame.seen.height,
        # The narrow alternative: only the culprit documents the window drew that a scorer
        # flagged. When the blamed source is a whole dataset (no finer provenance), this is the
        # list to block if removing the dataset is too much.
        documents_flagged=documents_by_dataset(flagged_documents(blame.seen, window_docs)),
        ahead=ahead_info
        | {"skip_ahead": settings.skip_ahead, "advice": ahead_advice(ahead_info, trainer.no_skip)},
        fingerprint=run.fingerprint,
        notes=run.notes + ([NO_CULPRIT_NOTE] if not blame.clusters else []),
        tracker_file=TRACKER_FILE if tracked else None,
    )
    # the action the plan leads with (rebuild or skip) and a readme for every key
    plan.action = action_for_plan(plan, run.config, run.out, trainer, run.replayer)
    plan.readme = SKIP_README
    plan.provenance = provenance(run.config.name)
    return plan
